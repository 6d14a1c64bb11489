// SPDX-License-Identifier: MIT
// fix: the diff twice (as the failing load asks, and with every rule to find the data), a plan
// of chunk references, the new tree written beside the source, and the same diff of the result.
#include "shardscope/session.h"

#include "common/backgroundworker.h"
#include "fix/fixoutput.h"
#include "fix/fixplan.h"
#include "fix/metadatawriter.h"
#include "fix/rewrite.h"
#include "fix/statedictwriter.h"
#include "read/mappedfile.h"
#include "read/readers.h"
#include "read/ziparchive.h"
#include "session/opened.h"
#include "shardscope/escape.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace shardscope {

namespace {

Error cancelled()
{
    return makeError(Error::Code::Cancelled, "cancelled");
}

bool dcpBased(Format f)
{
    return f == Format::Dcp || f == Format::MegatronFsdpDtensor || f == Format::MegatronTorchDist;
}

constexpr const char *kFixFormats =
    "fix writes DCP-based checkpoints (DCP, fsdp_dtensor, torch_dist), Megatron's legacy rank "
    "files, torch.save files and sets, and safetensors files and sets";

bool fixable(Format f)
{
    return dcpBased(f) || detail::stateDictFormat(f) || f == Format::MegatronLegacy;
}

// The rank files a legacy repair writes anew, as stored: their records and pickles.
Result<std::vector<detail::LegacyArchive>> readLegacyArchives(const CheckpointIndex &source,
                                                              const std::vector<std::string> &files)
{
    std::vector<detail::LegacyArchive> out;
    for (const std::string &f : files) {
        const std::string path = (std::filesystem::path(source.dataDir) / f).string();
        auto mapped = detail::MappedFile::open(path);
        if (!mapped)
            return mapped.error();
        auto zip = detail::ZipArchive::parse((*mapped)->bytes());
        if (!zip)
            return zip.error().inFile(path);
        detail::LegacyArchive a;
        a.file = f;
        a.prefix = zip->prefix();
        auto pickle = zip->data("data.pkl");
        if (!pickle)
            return pickle.error().inFile(path);
        a.pickle.assign(reinterpret_cast<const char *>(pickle->data()), pickle->size());
        for (const detail::ZipArchive::Record &r : zip->records())
            if (r.name != "data.pkl")
                a.records.push_back({r.name, r.offset, r.size});
        out.push_back(std::move(a));
    }
    return out;
}

// What keeps fix from writing this checkpoint at all: a torch.save file is written back from its
// tensors only, and objects beside them (Megatron's args, an iteration) would be lost.
std::string unwritable(const CheckpointIndex &index)
{
    if (index.info.count("dcp.serialization_format"))
        return "its tensors are safetensors blocks (FileSystemWriter(serialization_format="
               "SAFETENSORS)), which torch's FileSystemReader cannot load: a new .metadata over "
               "them would not load either";
    if (index.info.count("dcp.storage_reader"))
        return "it is HuggingFaceStorageWriter's safetensors shards, which torch's "
               "HuggingFaceStorageReader reads by their own headers, never through a .metadata: "
               "a repair by references has nowhere to put its new keys";
    if (index.format == Format::TorchSave)
        for (const ObjectEntry &o : index.objects)
            return "it holds objects beside its tensors (" + o.key +
                   "); fix writes torch.save files of tensors only";
    return {};
}

std::string diffArguments(const DiffOptions &o)
{
    std::string args;
    for (const std::string &r : o.disabledRules)
        args += " --disable-rule " + shellQuote(r);
    if (o.strictness != Strictness::AssumeOkUnexpected)
        args += " --strictness " + std::string(strictnessName(o.strictness));
    if (!o.strictLoad)
        args += " --no-strict";
    if (!o.includeOptimizer)
        args += " --no-optimizer";
    return args;
}

// The commands that check the output, opened by `opened`.
void commands(FixResult &result, const FixRequest &request, const std::string &opened)
{
    const std::string out = shellQuote(opened), lay = shellQuote(request.layout);
    result.diffCommand =
        "shardscope-cli diff " + out + " --layout " + lay + diffArguments(request.options);
    result.verifyCommand = "shardscope-cli verify " + out + " --layout " + lay;
    for (const std::string &r : request.options.disabledRules)
        result.verifyCommand += " --disable-rule " + shellQuote(r);
}

std::string manifest(const FixRequest &request, const FixResult &result)
{
    nlohmann::json changes = nlohmann::json::array();
    for (const FixChangeCount &c : result.changes)
        changes.push_back({{"kind", c.kind}, {"count", c.count}, {"examples", c.examples}});
    nlohmann::json unused = nlohmann::json::array();
    for (const FixUnused &u : result.unused)
        unused.push_back({{"key", u.key}, {"kept", u.kept}, {"why", u.why}});
    std::error_code ec;
    const auto absolute = [&ec](const std::string &p) {
        return std::filesystem::absolute(p, ec).lexically_normal().string();
    };
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return nlohmann::json{{"schema", "shardscope.fix/1"},
                          {"source", absolute(request.checkpoint)},
                          {"layout", request.layout.empty()
                                         ? nlohmann::json(nullptr)
                                         : nlohmann::json(absolute(request.layout))},
                          {"format", result.format},
                          {"disabled_rules", request.options.disabledRules},
                          {"strictness", strictnessName(request.options.strictness)},
                          {"strict_load", request.options.strictLoad},
                          {"command", request.commandLine},
                          {"created", when},
                          {"changes", changes},
                          {"unused", unused},
                          {"copied_from_outside", result.copiedFromOutside},
                          // Read back before it took its name: whether the load as asked
                          // fills every parameter of it, and if not, what it still fails on.
                          {"repaired", result.stillFails.empty()},
                          {"still_fails", result.stillFails},
                          {"bytes_referenced", result.bytesReferenced},
                          {"bytes_written", result.bytesWritten},
                          {"for_torch", result.forTorch ? nlohmann::json(result.forTorch->text())
                                                        : nlohmann::json(nullptr)}}
               .dump(1, ' ', false, nlohmann::json::error_handler_t::replace) +
           "\n";
}

// Where the data is: every rule on, as if the loader ran every handler.
DiffOptions everyRule(const DiffOptions &asked)
{
    DiffOptions o = asked;
    o.disabledRules.clear();
    o.everyRule = true;
    o.measureCasts = o.checkInit = o.previewRepair = false;
    return o;
}

// Why torch `v` cannot read what fix would write from `index`: the limits of its data.
std::vector<std::string> torchBlockers(const TorchReadability &rewritten, TorchVersion v)
{
    std::vector<std::string> out;
    for (const TorchLimit &l : rewritten.limits)
        if (!l.from || *l.from > v)
            out.push_back("torch " + v.text() + " cannot read it whatever its metadata: " + l.why);
    return out;
}
// The output as read back from its temporary name, its paths moved to OUT (where it now is)
// and the manifest's repaired_from set (what the open reads from the manifest, written after
// the read-back): the index a caller may show without reading it again.
void adoptWritten(FixResult &result, CheckpointIndex written, const std::string &temporary,
                  const FixRequest &request)
{
    std::error_code ec;
    const std::string out =
        std::filesystem::weakly_canonical(std::filesystem::absolute(request.output), ec).string();
    const auto moved = [&](std::string &path) {
        if (path.starts_with(temporary))
            path = out + path.substr(temporary.size());
    };
    moved(written.inputPath);
    moved(written.dataDir);
    for (auto &[k, v] : written.info)
        moved(v);
    for (Problem &p : written.problems)
        moved(p.file);
    written.info["repaired_from"] =
        std::filesystem::absolute(request.checkpoint, ec).lexically_normal().string();
    result.index = std::make_shared<const CheckpointIndex>(std::move(written));
}

// fix --for-torch without a layout: the same keys and data, metadata in the form torch `v`
// reads (our writer's: TensorProperties in five fields), over links to the source's files.
Result<FixResult> retarget(const FixRequest &request, CheckpointIndex &&source, FixResult result,
                           const JobControl &control)
{
    const TorchVersion v = *request.forTorch;
    result.sourceTorch = torchReadability(source);
    if (!result.sourceTorch.applies)
        return makeError(Error::Code::Unsupported,
                         "fix --for-torch writes DCP metadata; " + result.format + " has none")
            .inFile(request.checkpoint);
    const size_t problems = result.blockers.size();
    for (std::string &b : torchBlockers(torchReadabilityRewritten(source), v))
        result.blockers.push_back(std::move(b));
    const bool unreadableByV = result.blockers.size() > problems;
    if (result.sourceTorch.reads(v) && !unreadableByV) {
        result.alreadyLoads = true; // torch v already reads it: nothing to write
        return result;
    }
    if (unreadableByV || (!result.blockers.empty() && !request.partial))
        return result;
    if (!control.report({"write", 0, 0}))
        return cancelled();
    detail::FixOutputOptions options;
    options.output = request.output;
    options.copy = request.copy;
    options.force = request.force;
    std::string temporary;
    std::optional<CheckpointIndex> written;
    options.check = [&](const std::string &top) -> Status {
        temporary = top;
        OpenOptions open;
        open.useCache = false;
        auto reread = openCheckpoint(top, open);
        if (!reread) {
            result.stillFails = "the output does not open: " + reread.error().toString();
            return Ok{};
        }
        result.outputTorch = torchReadability(*reread);
        if (!result.outputTorch.reads(v))
            result.stillFails = "torch " + v.text() +
                                " does not read its metadata: " + result.outputTorch.explained();
        written = std::move(*reread);
        return Ok{};
    };
    options.manifest = [&] { return manifest(request, result); };
    if (Status st = detail::writeFixedCheckpoint(source, options, result); !st)
        return st.error();
    result.written = true;
    result.diffCommand = "shardscope-cli inspect " + shellQuote(request.output);
    result.verifyCommand.clear();
    if (written)
        adoptWritten(result, std::move(*written), temporary, request);
    control.report({"done", 1, 1});
    return result;
}

} // namespace

namespace detail {

void previewRepair(const CheckpointIndex &index, const Layout &layout, DiffResult &diff,
                   const std::string &checkpoint, const std::string &layoutPath,
                   const std::string &layoutCommand)
{
    RepairPreview &r = diff.repair.emplace();
    if (!fixable(index.format)) {
        r.unsupported = std::string(kFixFormats) + "; " + std::string(formatName(index.format)) +
                        " is not one yet";
        return;
    }
    if (std::string why = unwritable(index); !why.empty()) {
        r.unsupported = "fix cannot write this checkpoint: " + why;
        return;
    }
    std::string out = checkpoint;
    while (out.size() > 1 && out.back() == '/')
        out.pop_back();
    r.command = (layoutCommand.empty() ? std::string() : layoutCommand + " && ") +
                "shardscope-cli fix " + shellQuote(checkpoint) + " --layout " +
                shellQuote(layoutPath) + diffArguments(diff.options) + " -o " +
                shellQuote(out + "-fixed");
    for (const Problem &p : index.problems)
        if (p.effect == Problem::Effect::Unreadable && r.blockers.size() < 20)
            r.blockers.push_back(p.toString());
    auto found = diffAgainstLayout(index, layout, everyRule(diff.options), {});
    if (!found) {
        r.blockers.push_back(found.error().toString());
        return;
    }
    const FixPlan plan = planFix(index, diff, *found);
    for (const FixChangeCount &c : plan.changes)
        r.changes.emplace_back(c.kind, c.count);
    if (detail::stateDictFormat(index.format))
        r.dataWritten = "its files written anew, their tensor data copied";
    else if (index.format == Format::MegatronLegacy)
        r.dataWritten = "the rank files whose model changes written anew (their tensor data "
                        "copied), the others hard-linked";
    r.blockers.insert(r.blockers.end(), plan.blockers.begin(), plan.blockers.end());
    if (r.changes.empty() && r.blockers.empty()) {
        // Nothing a fix would write (a command that offers "()" repairs nothing): the load
        // fills everything and only keys it does not read are left.
        r.command.clear();
        r.unsupported =
            loadsEveryParameter(diff)
                ? "nothing for fix to repair: the load fills every parameter; the " +
                      std::to_string(plan.unused.size()) +
                      " stored tensors no parameter uses stay as they are (" +
                      (plan.unused.empty() ? std::string("none") : plan.unused.front().why) + ")"
                : std::string("fix finds nothing it could change for this load");
    }
}

} // namespace detail

Result<FixResult> runFix(const FixRequest &request, const JobControl &control)
{
    if (request.output.empty())
        return makeError(Error::Code::Unsupported, "fix needs an output directory (-o OUT)");
    if (!control.report({"open", 0, 0}))
        return cancelled();
    // An index opened here is ours to move into the repaired one (650,000 keys are not copied).
    CheckpointIndex owned;
    if (!request.opened) {
        auto opened = openCheckpoint(request.checkpoint);
        if (!opened)
            return opened.error();
        owned = std::move(*opened);
    }
    const CheckpointIndex &source = request.opened ? *request.opened : owned;
    if (request.layout.empty()) {
        if (!request.forTorch)
            return makeError(Error::Code::Unsupported,
                             "fix needs a layout (--layout) or a torch to write for (--for-torch)");
        FixResult result;
        result.checkpoint = request.checkpoint;
        result.output = request.output;
        result.format = std::string(formatName(source.format));
        result.options = request.options;
        result.forTorch = request.forTorch;
        for (const Problem &p : source.problems)
            if (p.effect == Problem::Effect::Unreadable && result.blockers.size() < 20)
                result.blockers.push_back(p.toString());
        if (!result.blockers.empty() && !request.partial)
            return result;
        return retarget(request,
                        request.opened ? CheckpointIndex(*request.opened) : std::move(owned),
                        std::move(result), control);
    }
    auto read = detail::layoutOrRead(request.openedLayout, request.layout);
    if (!read)
        return read.error();
    const std::shared_ptr<const Layout> layout = *read;
    FixResult result;
    result.checkpoint = request.checkpoint;
    result.layout = request.layout;
    result.output = request.output;
    result.format = std::string(formatName(source.format));
    result.options = request.options;
    commands(result, request, request.output);

    // Problems the open found (a missing or cut data file) are not names: no repair for them.
    for (const Problem &p : source.problems)
        if (p.effect == Problem::Effect::Unreadable) {
            result.blockers.push_back(p.toString());
            if (result.blockers.size() >= 20)
                break;
        }

    auto diff = [&](const CheckpointIndex &index, const DiffOptions &options,
                    const char *stage) -> Result<DiffResult> {
        bool stopped = false;
        auto d = diffAgainstLayout(index, *layout, detail::withValueComparison(options, index),
                                   [&](uint64_t done, uint64_t total) {
                                       stopped = stopped || !control.report({stage, done, total});
                                       return !stopped;
                                   });
        if (stopped)
            return cancelled();
        return d;
    };
    DiffOptions asked = request.options;
    asked.measureCasts = asked.checkInit = asked.previewRepair = false;
    auto before = diff(source, asked, "diff");
    if (!before)
        return before.error();
    // No torch reader loads these tensors, so no .metadata over them can load: said first.
    if (source.info.count("dcp.serialization_format"))
        return makeError(Error::Code::Unsupported,
                         "fix cannot write this checkpoint: " + unwritable(source))
            .inFile(request.checkpoint);
    // Tensors no parameter uses that the load does not read (DCP) leave nothing to repair.
    const auto unused = detail::unusedTensors(source, *before);
    const bool onlyKept =
        std::all_of(unused.begin(), unused.end(), [](const auto &u) { return u.second.kept; });
    result.forTorch = request.forTorch;
    if (request.forTorch) {
        result.sourceTorch = torchReadability(source);
        for (std::string &b : torchBlockers(torchReadabilityRewritten(source), *request.forTorch))
            result.blockers.push_back(std::move(b));
    }
    if (loadsEveryParameter(*before) && onlyKept && result.blockers.empty() && request.forTorch &&
        result.sourceTorch.applies && !result.sourceTorch.reads(*request.forTorch)) {
        // It loads, but not in that torch: only its metadata is written anew.
        result.after = std::move(*before);
        return retarget(request,
                        request.opened ? CheckpointIndex(*request.opened) : std::move(owned),
                        std::move(result), control);
    }
    if (loadsEveryParameter(*before) && onlyKept && result.blockers.empty()) {
        for (const auto &[entry, u] : unused)
            result.unused.push_back(u);
        result.alreadyLoads = true;
        result.after = std::move(*before);
        return result;
    }
    if (!fixable(source.format))
        return makeError(Error::Code::Unsupported,
                         std::string(kFixFormats) + "; " + result.format + " is not one yet")
            .inFile(request.checkpoint);
    if (std::string why = unwritable(source); !why.empty())
        return makeError(Error::Code::Unsupported, why).inFile(request.checkpoint);
    auto found = diff(source, everyRule(asked), "locate");
    if (!found)
        return found.error();
    if (!control.report({"plan", 0, 0}))
        return cancelled();
    detail::FixPlan plan = detail::planFix(source, *before, *found);
    result.changes = plan.changes;
    result.blockers.insert(result.blockers.end(), plan.blockers.begin(), plan.blockers.end());
    result.unused = plan.unused;
    result.bytesReferenced = plan.bytesReferenced;
    if (plan.empty() || (!result.blockers.empty() && !request.partial)) {
        result.before = std::make_shared<const DiffResult>(std::move(*before));
        return result; // nothing written: the blockers say why
    }

    // Megatron's legacy rank files keep their names inside: the ones whose `model` changes
    // are written anew (read before the source index moves into the repaired one).
    std::vector<detail::LegacyArchive> legacy;
    if (source.format == Format::MegatronLegacy) {
        auto archives = readLegacyArchives(
            source, detail::legacyFilesChanged(source, plan, layout->parallel.tp));
        if (!archives)
            return archives.error();
        legacy = std::move(*archives);
    }
    CheckpointIndex fixed = detail::applyFix(
        request.opened ? CheckpointIndex(*request.opened) : std::move(owned), plan);
    if (!control.report({"write", 0, 0}))
        return cancelled();
    detail::FixOutputOptions options;
    options.output = request.output;
    options.copy = request.copy;
    options.force = request.force;
    std::string main; // what the output is opened by, inside it ("": the output itself)
    if (detail::stateDictFormat(fixed.format)) {
        options.writeFiles = [&](const std::string &dir,
                                 const detail::FixOutputOptions::Place &place) -> Status {
            auto written = detail::writeStateDict(fixed, plan, dir, place);
            if (!written)
                return written.error();
            result.bytesWritten = written->bytesWritten;
            result.filesWritten = written->filesWritten;
            // A directory opens by itself unless its file is a torch.save or an index that
            // open() does not look for by name.
            if (fixed.format == Format::TorchSave ||
                ((fixed.format == Format::SafetensorsIndex ||
                  fixed.format == Format::TorchSaveIndex) &&
                 written->mainFile != "model.safetensors.index.json" &&
                 written->mainFile != "pytorch_model.bin.index.json"))
                main = written->mainFile;
            return Ok{};
        };
    } else if (fixed.format == Format::MegatronLegacy) {
        for (const detail::LegacyArchive &a : legacy)
            options.replaced.insert(a.file);
        options.writeInto = [&](const std::string &dataDir) -> Status {
            auto written = detail::writeLegacyFiles(fixed, plan, legacy, dataDir);
            if (!written)
                return written.error();
            result.bytesWritten = written->bytesWritten;
            result.filesWritten = written->filesWritten;
            return Ok{};
        };
    } else if (!plan.rewrites.empty() || !plan.objectWrites.empty()) {
        result.bytesWritten = plan.bytesRewritten;
        options.dataFile = detail::placeRewrites(fixed, plan);
        options.writeData = [&](int fd, const std::string &path) {
            return detail::writeRewrites(fixed, plan, fd, path, [&](uint64_t done, uint64_t all) {
                return control.report({"rewrite", done, all});
            });
        };
    }
    // The output as written, read back from disk as the load will read it (our .metadata
    // pickle, the files written anew) and diffed with the same request and rules, before it
    // takes its name: the manifest says whether it is a repair.
    std::optional<DiffResult> check;
    std::optional<CheckpointIndex> written;
    std::string temporary;
    options.check = [&](const std::string &top) -> Status {
        temporary = top;
        if (!control.report({"check", 0, 0}))
            return cancelled();
        // Written: the plan's index and the diff that located the data are done with, freed
        // beside the read-back (at DeepSeek-V3 scale 600 MB that would double its peak).
        detail::releaseInBackground(std::move(*found));
        detail::releaseInBackground(std::move(fixed));
        const std::string at = main.empty() ? top : (std::filesystem::path(top) / main).string();
        OpenOptions open;
        open.useCache = false; // a temporary path: nothing for the persistent index
        auto reread = openCheckpoint(at, open);
        if (!reread) {
            result.stillFails = "the output does not open: " + reread.error().toString();
            return Ok{};
        }
        auto d = diff(*reread, asked, "check");
        if (!d)
            return d.error();
        if (!loadsEveryParameter(*d)) {
            std::string message = d->outcome.message.substr(0, d->outcome.message.find('\n'));
            result.stillFails = std::to_string(d->loadableModel) + " of " +
                                std::to_string(d->expectedModel) + " parameters filled; " +
                                std::string(actionName(d->outcome.action)) +
                                (message.empty() ? std::string() : ": " + message);
            for (const DiffEntry &e : d->entries)
                if (!e.realLoadFills) {
                    result.stillFails += " (first: " + e.name + ": " + e.reason + ")";
                    break;
                }
        }
        if (request.forTorch) {
            result.outputTorch = torchReadability(*reread);
            if (!result.outputTorch.reads(*request.forTorch))
                result.stillFails +=
                    (result.stillFails.empty() ? "" : "; ") + std::string("torch ") +
                    request.forTorch->text() +
                    " does not read its metadata: " + result.outputTorch.explained();
        }
        check = std::move(*d);
        written = std::move(*reread);
        return Ok{};
    };
    options.manifest = [&] { return manifest(request, result); };
    if (Status st = detail::writeFixedCheckpoint(fixed, options, result); !st)
        return st.error();
    result.written = true;
    const std::string opened =
        main.empty() ? request.output : (std::filesystem::path(request.output) / main).string();
    commands(result, request, opened);
    if (check) {
        check->checkpoint = opened;
        check->against = request.layout;
        result.after = std::move(*check);
    }
    control.report({"done", 1, 1});
    result.before = std::make_shared<const DiffResult>(std::move(*before));
    if (written)
        adoptWritten(result, std::move(*written), temporary, request);
    return result;
}

} // namespace shardscope
