// SPDX-License-Identifier: MIT
#include "diffcommand.h"
#include "fixcommand.h"
#include "frontdoor.h"
#include "inspectcommand.h"
#include "safeoutput.h"
#include "verifycommand.h"

#include <CLI/CLI.hpp>
#include <shardscope/devices.h>
#include <shardscope/escape.h>
#include <shardscope/remote.h>
#include <shardscope/version.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <sys/stat.h>
#include <unistd.h>

using namespace shardscope::cli;
using shardscope::kVersion;

namespace {

// The command as it runs on the remote host: without --ssh and --server (what a report and
// a fix's manifest record, so that they are those the same command writes there). `layout`:
// where the layout named by --layout is there (a fix's layout file here travels and is written
// beside its OUT); empty: as given.
std::vector<std::string> remoteArguments(int argc, char **argv, const std::string &layout = {})
{
    std::vector<std::string> args;
    for (int i = 0; i < argc; ++i) {
        const std::string_view a = argv[i];
        if ((a == "--ssh" || a == "--server") && i + 1 < argc) {
            ++i;
            continue;
        }
        if (a.starts_with("--ssh=") || a.starts_with("--server="))
            continue;
        if (!layout.empty() && a == "--layout" && i + 1 < argc) {
            args.emplace_back(a);
            args.push_back(layout);
            ++i;
            continue;
        }
        args.emplace_back(!layout.empty() && a.starts_with("--layout=") ? "--layout=" + layout
                                                                        : std::string(a));
    }
    return args;
}

// A local file (what --ssh sends along rather than naming).
bool isLocalFile(const std::string &path)
{
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

using shardscope::RemoteLocation;
using shardscope::RemoteSession;
using shardscope::RemoteTarget;

shardscope::Result<std::shared_ptr<RemoteSession>> connectTo(const RemoteTarget &target,
                                                             bool noCache)
{
    shardscope::RemoteConnectOptions options;
    options.noCache = noCache;
    return RemoteSession::connect(target, options);
}

// diff's and report's checkpoint and --against: each here (a plain path without --ssh), on
// --ssh's host (a plain path with it), or where its ssh://HOST/PATH or HOST:/PATH says. Both
// in one place: that place's session runs the command as --ssh does. In two: each index is
// opened where it lives and the comparison runs here. False: no side names a host of its own
// (--ssh alone decides, as for every command).
shardscope::Result<bool> placeSides(DiffCommandOptions &diff, const std::string &ssh,
                                    const std::string &server, bool noCache,
                                    std::vector<std::shared_ptr<RemoteSession>> &sessions)
{
    std::vector<std::string *> args{&diff.checkpoint};
    if (diff.against)
        args.push_back(&*diff.against);
    std::vector<std::optional<RemoteTarget>> targets;
    bool named = false;
    for (std::string *a : args) {
        std::optional<RemoteTarget> target;
        if (auto location = RemoteLocation::parse(*a)) {
            if (!*location)
                return location->error();
            target = (*location)->target;
            *a = (*location)->path;
            named = true;
        } else if (!ssh.empty()) {
            auto t = RemoteTarget::parse(ssh);
            if (!t)
                return t.error();
            target = *t;
        }
        if (target)
            target->server = server;
        targets.push_back(std::move(target));
    }
    if (!named)
        return false;
    const auto same = [](const std::optional<RemoteTarget> &a,
                         const std::optional<RemoteTarget> &b) {
        return a.has_value() == b.has_value() && (!a || (a->host == b->host && a->port == b->port));
    };
    diff.acrossHosts = targets.size() == 2 && !same(targets[0], targets[1]);
    std::vector<RemoteSession *> at;
    for (size_t i = 0; i < targets.size(); ++i) {
        RemoteSession *s = nullptr;
        if (i == 1 && !diff.acrossHosts) {
            s = at[0];
        } else if (targets[i]) {
            auto connected = connectTo(*targets[i], noCache);
            if (!connected)
                return connected.error();
            sessions.push_back(std::move(*connected));
            s = sessions.back().get();
        }
        at.push_back(s);
    }
    diff.checkpointAt = at[0];
    diff.againstAt = at.size() > 1 ? at[1] : nullptr;
    return true;
}

} // namespace

int main(int argc, char **argv)
{
    // Started by ssh as SSH_ASKPASS for a session with a prompt hook: answer and leave.
    if (auto code = shardscope::runAskpassHelper(argc, argv))
        return *code;
    // Whatever a checkpoint's names hold, nothing printed reaches the terminal as a control.
    const SafeOutput safeOutput;
    // Past a file size limit, a write fails (and the output file stays as it was) rather than
    // the process dying.
    std::signal(SIGXFSZ, SIG_IGN);
    // A mapped file cut or failing under us: reads go through pread() and say which key, so this
    // is the narrow window left (a file cut mid-copy). One line and exit 2, not a core dump.
    std::signal(SIGBUS, [](int) {
        static const char message[] = "shardscope-cli: a checkpoint file was cut short or failed "
                                      "while it was read (SIGBUS); nothing was written\n";
        [[maybe_unused]] const auto n = ::write(2, message, sizeof message - 1);
        _exit(2);
    });
    // Under a launcher, the others are stopped when one rank fails (torchrun's agent sends
    // SIGTERM): say so in one line; the launcher's report names the rank that failed.
    if (std::getenv("WORLD_SIZE") || std::getenv("SLURM_PROCID"))
        std::signal(SIGTERM, [](int) {
            static const char message[] =
                "shardscope-cli: stopped by its launcher (SIGTERM): another rank failed or the "
                "job was cancelled; the launcher's report names which\n";
            [[maybe_unused]] const auto n = ::write(2, message, sizeof message - 1);
            _exit(2);
        });
    CLI::App app{"ShardScope: inspect large-model training checkpoints"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("shardscope-cli ") + kVersion);
    bool noCache = false;
    app.add_flag("--no-cache", noCache,
                 "Decode checkpoint metadata anew: neither read nor write the persistent index "
                 "(also SHARDSCOPE_NO_CACHE=1)");
    std::string sshDestination, serverPath = "shardscope-cli";
    auto *sshOption = app.add_option(
        "--ssh", sshDestination,
        "[user@]host[:port]: run the command on that host (the system's ssh, as configured), "
        "on its paths; --layout and --config files here are sent along, report -o is written "
        "here, fix's output there (with a layout file here written beside it, OUT.layout.json)");
    auto *serverOption = app.add_option(
        "--server", serverPath,
        "With --ssh or a checkpoint on another host: the shardscope-cli to run there (default: "
        "the one on its PATH)");
    app.fallthrough(); // --no-cache after the subcommand too

    InspectOptions inspect;
    CLI::App *ins = app.add_subcommand(
        "inspect", "Show a checkpoint's keys, dtypes, shapes and chunks (format is detected)");
    ins->add_option("path", inspect.request.path,
                    "DCP directory, Megatron checkpoint root or iteration directory, .pt/.bin, "
                    ".safetensors or model.safetensors.index.json")
        ->required();
    ins->add_option("--filter", inspect.request.filters,
                    "Only keys matching this glob (repeatable)");
    ins->add_option("--tensor", inspect.request.tensor, "Show one tensor (with --stats / --hash)");
    ins->add_flag("--stats", inspect.request.stats,
                  "Read tensor data: min/max/mean/std, NaN/Inf counts (all selected tensors)");
    ins->add_flag("--hash", inspect.request.hash,
                  "Read tensor data: SHA-256 of the contiguous bytes");
    ins->add_option("--init-std", inspect.request.initStd,
                    "With --stats: flag tensors that look like a fresh normal(0, this) draw or "
                    "an init constant (Megatron's --init-method-std; 0: never)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    ins->add_flag("--json", inspect.json, "Machine-readable output (schema shardscope.inspect/1)");
    ins->add_flag("--objects", inspect.request.objects,
                  "Decode non-tensor entries (args, RNG state, …)");
    bool noCollapse = false;
    ins->add_flag("--no-collapse", noCollapse, "List every key; do not fold repeated layers");
    ins->add_flag("--all-problems", inspect.allProblems,
                  "One stderr line per broken key (default: one per cause and file)");

    CLI::App *dev = app.add_subcommand("devices", "List CUDA devices this build can use");
    CLI::App *serve = app.add_subcommand(
        "serve", "Serve a remote client (`--ssh`) on stdin and stdout; ssh runs it");
    bool stdio = false;
    serve->add_flag("--stdio", stdio, "Speak the protocol on stdin and stdout (the only way)")
        ->required();

    LayoutCommandOptions layout;
    CLI::App *lay = app.add_subcommand(
        "layout", "Generate a model layout (docs/layout-format.md) from a model config");
    lay->add_option("--from-config", layout.config,
                    "Hugging Face config.json, Megatron arguments (JSON or --flag text), or a "
                    "Megatron checkpoint (its saved args)")
        ->required();
    lay->add_option("-o,--output", layout.output, "Write here (default: stdout)");
    lay->add_option("--tp", layout.layout.parallel.tp, "Tensor-parallel size");
    lay->add_option("--pp", layout.layout.parallel.pp, "Pipeline-parallel size");
    lay->add_option("--ep", layout.layout.parallel.ep, "Expert-parallel size");
    lay->add_option("--etp", layout.layout.parallel.etp, "Expert tensor-parallel size");
    lay->add_option("--dp", layout.layout.parallel.dpShard, "FSDP / DP-shard size");
    lay->add_option("--pp-first-layers", layout.layout.parallel.firstStageLayers,
                    "Decoder layers on the first pipeline stage (default: an even split)");
    lay->add_option("--pp-last-layers", layout.layout.parallel.lastStageLayers,
                    "Decoder layers on the last pipeline stage (default: an even split)");
    lay->add_option("--dtype", layout.layout.dtype,
                    "dtype the load asks for (default float32: fsdp_dtensor main params)");
    lay->add_flag("--sequential-experts", layout.layout.sequentialExperts,
                  "local_experts.<e>.linear_fc1 instead of TE grouped linear_fc1.weight<e>");
    lay->add_option("--megatron-version", layout.layout.megatronVersion,
                    "Megatron-Core that builds the model: a release (0.16: no fused MLA down "
                    "projection or query norm) or main (default)");
    lay->add_flag("--no-mla-down-proj-fusion", layout.unfusedMla,
                  "MLA with separate linear_q_down_proj / linear_kv_down_proj");
    lay->add_flag(
           "--mla-query-norm,!--no-mla-query-norm",
           [&layout](int64_t n) { layout.layout.mlaQueryNorm = n > 0; },
           "MLA without q_lora: linear_q_proj with (default under TE and qk_layernorm) or "
           "without its fused query norm")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    lay->add_flag("--local-experts", layout.layout.localExperts,
                  "Name experts with EP-local indices (one EP rank's model; needs --ep)");
    lay->add_flag("--gdn-tp-local", layout.layout.gdnTpLocal,
                  "GDN in_proj/conv1d already TP-local (Megatron-Bridge)");

    DiffCommandOptions diff;
    auto addDiffOptions = [&diff](CLI::App *c) {
        c->add_option("checkpoint", diff.checkpoint,
                      "The checkpoint to check: a path here (with --ssh, there), or on a host: "
                      "HOST:/PATH or ssh://[user@]HOST[:PORT]/PATH")
            ->required();
        auto *l = c->add_option("--layout", diff.layout,
                                "What the model expects (layout JSON); with --values, what names "
                                "both checkpoints' tensors");
        addConfigLayoutOptions(c, diff.config);
        l->excludes(c->get_option("--config"));
        auto *a = c->add_option(
            "--against", diff.against,
            "Another checkpoint, here or on a host (HOST:/PATH, ssh://HOST/PATH): two "
            "checkpoints in two places are compared here over both indexes (no tensor data "
            "moves); --values needs both in one place");
        auto *v = c->add_flag("--values", diff.values,
                              "With --against: compare every tensor value by value, through "
                              "the rules (exit 0 every tensor within tolerance, 1 differences "
                              "or tensors not compared, 2 cannot read)");
        v->needs(a);
        c->add_flag("--allow-not-compared", diff.allowNotCompared,
                    "--values: tensors that cannot be compared (a side lacks one, other "
                    "shapes) do not make the exit code 1; they are still counted and listed")
            ->needs(v);
        c->add_option("--rtol", diff.rtol,
                      "--values: relative tolerance, |a-b| <= atol + rtol*|b| (default 0)");
        c->add_option("--atol", diff.atol, "--values: absolute tolerance (default 0: bit-exact)");
        c->add_option("--max-memory", diff.maxMemory,
                      "--values: bytes of both sides' blocks held at once (default: a quarter "
                      "of RAM)");
        c->add_option("--threads", diff.threads, "--values: threads (default: one per core)")
            ->check(CLI::Range(0, 4096));
        c->add_flag("--no-gpu", diff.noGpu, "--values: compare on the CPU even with a GPU");
        c->add_option("--backend", diff.backend,
                      "--values under torchrun or srun: gloo, nccl or auto")
            ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
        c->add_option("--strictness", diff.strictness,
                      "Megatron --dist-ckpt-strictness (assume_ok_unexpected, log_unexpected, "
                      "log_all, raise_unexpected, raise_all, return_unexpected, return_all, "
                      "ignore_all)");
        c->add_flag("--no-strict-fsdp-dtensor-load,--no-strict", diff.partialLoad,
                    "A non-strict load: partial fsdp_dtensor/DCP load (strictness decides what "
                    "happens), load_state_dict(strict=False) for torch.save, safetensors and "
                    "Megatron's legacy torch format");
        c->add_option("--disable-rule", diff.disabledRules,
                      "Switch a rule off (repeatable; `shardscope-cli rules` lists them)");
        c->add_flag("--no-optimizer", diff.noOptimizer, "Do not diff optimizer state");
        c->add_flag("--every-rule", diff.everyRule,
                    "Where the data is: map every parameter by every rule, as if the loader "
                    "ran every handler (what fix takes its data from)");
        c->add_flag("--measure-casts", diff.measureCasts,
                    "Read the tensors a load casts to fewer bits and measure the change");
        c->add_flag("--fail-on-cast", diff.failOnCast,
                    "A cast that loses precision is a problem (exit 1), not a warning");
        c->add_flag("--check-init", diff.checkInit,
                    "Read what the load fills each parameter with and flag values that look "
                    "like a fresh initialization (a warning)");
        c->add_option("--init-std", diff.initStd,
                      "With --check-init: Megatron's --init-method-std (default 0.02; 0: only "
                      "constant norms and biases)");
    };
    CLI::App *dif = app.add_subcommand(
        "diff", "What a real load would fill, split, rename or leave at initial values");
    addDiffOptions(dif);
    dif->add_flag("--json", diff.json,
                  "Machine-readable output (shardscope.diff/1; with --values "
                  "shardscope.value-diff/1)");
    dif->add_flag("--all", diff.all,
                  "Text: every entry, kept key and unconsumed key on its own line, with "
                  "--against every change (default: problems and changes folded as the "
                  "report folds them, the rest counted per status)");
    CLI::App *rep = app.add_subcommand("report", "Write a fix report (.md, .html or .json)");
    addDiffOptions(rep);
    std::string reportPath;
    rep->add_option("-o,--output", reportPath, "FILE.md, FILE.html or FILE.json")->required();
    CLI::App *rul = app.add_subcommand("rules", "List the mapping rules");

    FixCommandOptions fix;
    CLI::App *fx = app.add_subcommand(
        "fix", "Write a repaired checkpoint the failing load accepts, beside the original "
               "(new metadata over hard-linked data)");
    fx->add_option("checkpoint", fix.checkpoint, "The checkpoint to repair")->required();
    fx->add_option("--layout", fix.layout,
                   "What the model expects (layout JSON); without it, --for-torch alone");
    fx->add_option("--for-torch", fix.forTorch,
                   "Write metadata this torch reads (2.4 to 2.15), over the same data files");
    fx->add_option("-o,--output", fix.output, "The new checkpoint (must not exist)")->required();
    fx->add_option("--strictness", fix.strictness,
                   "Megatron --dist-ckpt-strictness of the load to satisfy");
    fx->add_flag("--no-strict-fsdp-dtensor-load,--no-strict", fix.partialLoad,
                 "The load is a non-strict one (as diff)");
    fx->add_option("--disable-rule", fix.disabledRules,
                   "A rule the loader lacks (repeatable): the output is named so that it needs "
                   "none of them");
    fx->add_flag("--no-optimizer", fix.noOptimizer, "Repair only the model's parameters");
    fx->add_flag("--copy", fix.copy, "Copy the data files instead of hard-linking them");
    fx->add_flag("--force", fix.force, "Replace OUT when an earlier fix wrote it");
    fx->add_flag("--partial", fix.partial,
                 "Write what can be repaired even when some parameters cannot");
    fx->add_flag("--json", fix.json, "Machine-readable output (shardscope.fix-result/1)");

    VerifyCommandOptions verify;
    CLI::App *ver = app.add_subcommand(
        "verify", "Perform the planned load of every rank's shards and check it bit for bit");
    ver->add_option("checkpoint", verify.request.checkpoint, "The checkpoint")->required();
    ver->add_option("--layout", verify.request.layout, "What the model expects (layout JSON)")
        ->required();
    ver->add_option("--dp", verify.request.dp,
                    "DP-shard ranks to plan (default: the layout's, or under torchrun the "
                    "processes over tp × pp)");
    ver->add_option("--tp", verify.request.tp, "Tensor-parallel ranks (default: the layout's)");
    ver->add_option("--pp", verify.request.pp, "Pipeline stages (default: the layout's)");
    ver->add_option("--ep", verify.request.ep, "Expert-parallel ranks (default: the layout's)");
    ver->add_option("--etp", verify.request.etp,
                    "Expert tensor-parallel ranks (default: the layout's)");
    ver->add_option("--pp-first-layers", verify.request.firstStageLayers,
                    "Decoder layers on the first pipeline stage (Megatron's "
                    "--decoder-first-pipeline-num-layers; default: the layout's, or even)");
    ver->add_option(
        "--pp-last-layers", verify.request.lastStageLayers,
        "Decoder layers on the last pipeline stage (--decoder-last-pipeline-num-layers)");
    ver->add_option("--disable-rule", verify.request.disabledRules,
                    "Switch a rule off (repeatable)");
    ver->add_option("--max-memory", verify.request.maxMemory,
                    "Bytes to hold at once (default: a quarter of RAM); bigger parameters stream "
                    "through windows of rows");
    ver->add_option("--threads", verify.request.threads,
                    "Threads checking parameters side by side in one process (default: one per "
                    "core; fewer when the largest parameter would not fit its share of "
                    "--max-memory)")
        ->check(CLI::Range(0, 4096));
    ver->add_flag("--json", verify.json, "Machine-readable output (schema shardscope.verify/1)");
    ver->add_flag("--quiet", verify.quiet, "No progress bar");
    ver->add_flag("--hash", verify.request.hash, "SHA-256 of every gathered parameter (JSON)");
    ver->add_option("--backend", verify.backend,
                    "Collectives when launched by torchrun or srun: gloo (CPU), nccl (GPU) or "
                    "auto")
        ->check(CLI::IsMember({"auto", "gloo", "nccl"}));
    std::string launcher;
    auto *launch =
        ver->add_option("--launch", launcher,
                        "With --ssh: run as a job the server launches: srun (Slurm), torchrun "
                        "(one node) or auto (srun where it is, else torchrun)")
            ->check(CLI::IsMember({"auto", "srun", "torchrun"}))
            ->needs(sshOption);
    ver->add_option("--nodes", verify.launch.nodes, "--launch: nodes (srun)")
        ->check(CLI::Range(1, 100000))
        ->needs(launch);
    ver->add_option("--ranks", verify.launch.ranks, "--launch: processes in all")
        ->check(CLI::Range(1, 1000000))
        ->needs(launch);
    ver->add_option("--partition", verify.launch.partition, "--launch srun: the partition")
        ->needs(launch);
    ver->add_option("--time", verify.launch.timeLimit, "--launch srun: the time limit")
        ->needs(launch);
    ver->add_option("--account", verify.launch.account, "--launch srun: the account")
        ->needs(launch);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return e.get_exit_code() == 0 ? app.exit(e) : (app.exit(e), ExitUnreadable);
    }
    if (noCache) // read by every open, whichever command runs it
        ::setenv("SHARDSCOPE_NO_CACHE", "1", 1);
    if (*serve)
        return shardscope::serveStdio();
    // --ssh: the job runs there, through one session that lives until the command ends.
    std::shared_ptr<shardscope::RemoteSession> session;
    // diff and report: a side named ssh://HOST/PATH or HOST:/PATH is opened there.
    std::vector<std::shared_ptr<RemoteSession>> sides;
    bool placed = false;
    if (*dif || *rep) {
        auto p = placeSides(diff, sshDestination, serverPath, noCache, sides);
        if (!p) {
            std::cerr << "shardscope-cli: " << p.error().toString() << "\n";
            return ExitUnreadable;
        }
        placed = *p;
        if (placed && !diff.acrossHosts && !sides.empty()) { // one host: as --ssh
            session = sides.front();
            setRemote(session.get());
        }
    }
    if (serverOption->count() && sshDestination.empty() && !placed) {
        std::cerr << "shardscope-cli: --server goes with --ssh or a checkpoint on another host\n";
        return ExitUnreadable;
    }
    if (!sshDestination.empty() && !placed) {
        if (!*ins && !*dif && !*rep && !*ver && !*fx) {
            std::cerr << "shardscope-cli: --ssh runs inspect, diff, report, verify and fix; "
                         "this command runs here\n";
            return ExitUnreadable;
        }
        auto target = shardscope::RemoteTarget::parse(sshDestination);
        if (!target) {
            std::cerr << "shardscope-cli: " << target.error().message << "\n";
            return ExitUnreadable;
        }
        target->server = serverPath;
        auto connected = connectTo(*target, noCache);
        if (!connected) {
            std::cerr << "shardscope-cli: " << connected.error().toString() << "\n";
            return ExitUnreadable;
        }
        session = std::move(*connected);
        setRemote(session.get());
    }
    if (!launcher.empty())
        verify.launch.launcher = launcher == "srun" ? shardscope::RemoteLaunch::Launcher::Srun
                                 : launcher == "torchrun"
                                     ? shardscope::RemoteLaunch::Launcher::Torchrun
                                     : shardscope::RemoteLaunch::Launcher::Auto;
    if (*dev) {
        std::cout << "CUDA kernels: " << (shardscope::builtWithCuda() ? "built" : "not built")
                  << "\n";
        for (const auto &d : shardscope::cudaDevices())
            std::cout << "cuda:" << d.index << "  " << d.name << "  "
                      << d.memoryBytes / (1024 * 1024) << " MiB  sm_" << d.computeMajor
                      << d.computeMinor << "\n";
        return 0;
    }
    if (*lay) {
        for (const char *flag : {"--tp", "--pp", "--ep", "--etp", "--dp"})
            layout.layout.parallelGiven = layout.layout.parallelGiven || lay->count(flag) > 0;
        return runLayout(layout);
    }
    if (*rul)
        return runRules();
    if (*fx) {
        // With --ssh a layout file here travels and is written beside OUT there: the
        // manifest's command names it there.
        const bool sent = session && !fix.layout.empty() && isLocalFile(fix.layout);
        fix.commandLine = shardscope::shellCommand(remoteArguments(
            argc, argv, sent ? shardscope::layoutBesideOutput(fix.output) : std::string()));
        return runFix(fix);
    }
    if (*ver)
        return runVerify(verify);
    if (*dif || *rep) {
        if (!diff.layout && !diff.against && !diff.config.config) {
            std::cerr << "shardscope-cli: give --layout FILE, --config FILE or --against "
                         "CHECKPOINT\n";
            return ExitUnreadable;
        }
        if (diff.config.config && (diff.against || diff.values)) {
            std::cerr << "shardscope-cli: --config builds a layout for a diff against it; "
                         "with --against or --values give --layout\n";
            return ExitUnreadable;
        }
        noteParallelGiven(*dif ? dif : rep, diff.config);
        if (diff.layout && diff.against && !diff.values) {
            std::cerr << "shardscope-cli: --layout and --against go together only with --values\n";
            return ExitUnreadable;
        }
        diff.commandLine = shardscope::shellCommand(remoteArguments(argc, argv));
        if (*rep)
            diff.reportPath = reportPath;
        return runDiff(diff);
    }
    inspect.collapse = !noCollapse;
    return runInspect(inspect);
}
