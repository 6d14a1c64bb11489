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
#include "read/readers.h"
#include "session/opened.h"
#include "shardscope/escape.h"

#include <nlohmann/json.hpp>

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
    "fix writes DCP-based checkpoints (DCP, fsdp_dtensor, torch_dist), torch.save files and "
    "safetensors";

bool fixable(Format f)
{
    return dcpBased(f) || detail::stateDictFormat(f);
}

// What keeps fix from writing this checkpoint at all: a torch.save file is written back from its
// tensors only, and objects beside them (Megatron's args, an iteration) would be lost.
std::string unwritable(const CheckpointIndex &index)
{
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
    std::error_code ec;
    const auto absolute = [&ec](const std::string &p) {
        return std::filesystem::absolute(p, ec).lexically_normal().string();
    };
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return nlohmann::json{{"schema", "shardscope.fix/1"},
                          {"source", absolute(request.checkpoint)},
                          {"layout", absolute(request.layout)},
                          {"format", result.format},
                          {"disabled_rules", request.options.disabledRules},
                          {"strictness", strictnessName(request.options.strictness)},
                          {"strict_load", request.options.strictLoad},
                          {"command", request.commandLine},
                          {"created", when},
                          {"changes", changes},
                          {"bytes_referenced", result.bytesReferenced},
                          {"bytes_written", result.bytesWritten}}
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
    r.blockers.insert(r.blockers.end(), plan.blockers.begin(), plan.blockers.end());
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
    if (before->passes() && result.blockers.empty()) {
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
    result.bytesReferenced = plan.bytesReferenced;
    if (plan.empty() || (!result.blockers.empty() && !request.partial)) {
        result.before = std::make_shared<const DiffResult>(std::move(*before));
        return result; // nothing written: the blockers say why
    }

    CheckpointIndex fixed = detail::applyFix(
        request.opened ? CheckpointIndex(*request.opened) : std::move(owned), plan);
    if (!control.report({"write", 0, 0}))
        return cancelled();
    detail::FixOutputOptions options;
    options.output = request.output;
    options.copy = request.copy;
    options.force = request.force;
    std::string opened = request.output; // what the output is opened by
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
                (fixed.format == Format::SafetensorsIndex &&
                 written->mainFile != "model.safetensors.index.json"))
                opened = (std::filesystem::path(request.output) / written->mainFile).string();
            return Ok{};
        };
    } else if (!plan.rewrites.empty()) {
        result.bytesWritten = plan.bytesRewritten;
        options.dataFile = detail::placeRewrites(fixed, plan);
        options.writeData = [&](int fd, const std::string &path) {
            return detail::writeRewrites(fixed, plan, fd, path, [&](uint64_t done, uint64_t all) {
                return control.report({"rewrite", done, all});
            });
        };
    }
    options.manifest = [&] { return manifest(request, result); };
    if (Status st = detail::writeFixedCheckpoint(fixed, options, result); !st)
        return st.error();
    result.written = true;

    // What the failing load does with the repaired keys (`diffCommand` reads them back). A
    // state dict's files were written anew: they are read back, as the load will read them.
    if (detail::stateDictFormat(fixed.format)) {
        commands(result, request, opened);
        auto reread = openCheckpoint(opened);
        if (!reread)
            return reread.error();
        fixed = std::move(*reread);
    }
    auto check = diff(fixed, asked, "check");
    if (!check)
        return check.error();
    check->checkpoint = opened;
    check->against = request.layout;
    result.after = std::move(*check);
    control.report({"done", 1, 1});
    result.before = std::make_shared<const DiffResult>(std::move(*before));
    result.index = std::make_shared<const CheckpointIndex>(std::move(fixed));
    // The diff that located the data is done with: freed beside the caller.
    detail::releaseInBackground(std::move(*found));
    return result;
}

} // namespace shardscope
