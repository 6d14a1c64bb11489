// SPDX-License-Identifier: MIT
#include "diffcommand.h"
#include "inspectcommand.h"

#include <shardscope/escape.h>
#include <shardscope/session.h>
#include <shardscope/writefile.h>

#include <filesystem>
#include <iostream>
#include <utility>

namespace shardscope::cli {

namespace {

int fail(const Error &e)
{
    std::cerr << "shardscope-cli: " << e.toString() << "\n";
    return ExitUnreadable;
}

void printDiff(const DiffResult &d)
{
    std::cout << "checkpoint: " << visibleName(d.checkpoint) << " (" << visibleText(d.format)
              << ")\n"
              << "layout:     " << visibleName(d.against) << "\n"
              << "model:      " << d.loadableModel << " of " << d.expectedModel
              << " parameters filled by a real load\n";
    if (d.expectedOptimizer)
        std::cout << "optimizer:  " << d.loadableOptimizer << " of " << d.expectedOptimizer
                  << " states filled\n";
    std::cout << "load:       " << actionName(d.outcome.action);
    if (!d.outcome.message.empty())
        std::cout << ": " << visibleText(d.outcome.message);
    std::cout << "\n";
    for (const std::string &w : d.outcome.warnings)
        std::cout << "warning:    " << visibleText(w) << "\n";
    if (!d.outcome.keptAtInit.empty()) {
        std::cout << "\nSILENTLY KEPT AT INITIAL VALUES (" << d.outcome.keptAtInit.size() << "):\n";
        for (const std::string &k : d.outcome.keptAtInit)
            std::cout << "  " << visibleName(k) << "\n";
    }
    if (!d.outcome.loadedWrong.empty()) {
        std::cout << "\nSILENTLY FILLED FROM THE WRONG KEY (" << d.outcome.loadedWrong.size()
                  << "):\n";
        for (const std::string &k : d.outcome.loadedWrong)
            std::cout << "  " << visibleName(k) << "\n";
    }
    bool initHeader = false;
    for (const DiffEntry &e : d.entries)
        if (!e.looksInitial.empty()) {
            if (!std::exchange(initHeader, true))
                std::cout << "\nLOADS VALUES THAT LOOK FRESHLY INITIALISED:\n";
            std::cout << "  " << visibleName(e.name) << "\n      " << visibleText(e.looksInitial)
                      << "\n";
        }
    bool header = false;
    for (const DiffEntry &e : d.entries) {
        if (e.realLoadFills && e.status == LoadStatus::Ok)
            continue;
        if (!header) {
            std::cout << "\n";
            header = true;
        }
        std::cout << (e.realLoadFills ? "  " : "! ") << statusName(e.status) << "  "
                  << visibleName(e.name);
        if (!e.reason.empty())
            std::cout << "\n      " << visibleText(e.reason);
        if (!e.realLoadFills && !e.fix.empty())
            std::cout << "\n      fix: " << visibleText(e.fix);
        std::cout << "\n";
    }
    if (d.repair) {
        const RepairPreview &r = *d.repair;
        std::cout << "\nREPAIR:\n";
        if (r.command.empty()) {
            std::cout << "  " << visibleText(r.unsupported) << "\n";
        } else {
            std::string kinds;
            bool copies = false;
            for (const auto &[kind, n] : r.changes) {
                kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
                copies = copies || kind == "rewrite";
            }
            std::cout << "  " << visibleText(r.command) << "\n      "
                      << (r.blockers.empty()
                              ? "writes a checkpoint this load accepts (" + kinds + "): " +
                                    (copies ? "the rewritten keys copied into one new data "
                                              "file, everything else referenced"
                                            : "no tensor data copied")
                              : "repairs what it can (" +
                                    (kinds.empty() ? std::string("nothing") : kinds) +
                                    "); nothing is written without --partial while these "
                                    "remain:")
                      << "\n";
            for (size_t i = 0; i < r.blockers.size() && i < 10; ++i)
                std::cout << "  cannot: " << visibleText(r.blockers[i]) << "\n";
            if (r.blockers.size() > 10)
                std::cout << "  cannot: … and " << r.blockers.size() - 10 << " more\n";
        }
    }
    if (!d.unconsumed.empty()) {
        std::cout << "\nunconsumed keys (" << d.unconsumed.size() << "):\n";
        for (const UnconsumedKey &u : d.unconsumed)
            std::cout << "  " << visibleName(u.key) << "  (" << visibleText(u.note) << ")\n";
    }
}

} // namespace

int runLayout(const LayoutCommandOptions &o)
{
    LayoutOptions lo = o.layout;
    if (o.unfusedMla)
        lo.mlaDownProjFusion = false;
    auto layout = layoutFromConfig(o.config, lo);
    if (!layout)
        return fail(layout.error());
    const std::string text = layoutToJson(*layout);
    if (o.output.empty() || o.output == "-") {
        std::cout << text;
    } else if (auto error = writeFileAtomically(o.output, text)) {
        return fail(*error);
    } else {
        std::cerr << "wrote " << visibleName(o.output) << ": " << layout->params.size()
                  << " parameters (" << layout->family << ")\n";
    }
    return ExitHealthy;
}

namespace {

// --layout FILE, or the layout built from --config (then `layout` is the file the repair
// preview's first command writes).
struct LayoutSource
{
    std::string path;
    std::shared_ptr<const Layout> built;
    std::string command;
};

Result<LayoutSource> layoutSource(const DiffCommandOptions &o)
{
    if (!o.config.config)
        return LayoutSource{*o.layout, nullptr, {}};
    auto built = buildLayout(o.config);
    if (!built)
        return built.error();
    std::string stem = std::filesystem::path(*o.config.config).stem().string();
    const std::string path = (stem.empty() ? std::string("model") : stem) + "-layout.json";
    return LayoutSource{path, *built,
                        "shardscope-cli layout " +
                            std::string(configArguments(o.config)).replace(0, 8, "--from-config") +
                            " -o " + shellQuote(path)};
}

} // namespace

int runDiff(const DiffCommandOptions &o)
{
    DiffOptions options;
    options.disabledRules = o.disabledRules;
    options.strictLoad = !o.partialLoad;
    options.everyRule = o.everyRule;
    options.includeOptimizer = !o.noOptimizer;
    options.measureCasts = o.measureCasts;
    options.failOnCast = o.failOnCast;
    options.checkInit = o.checkInit;
    options.initStd = o.initStd;
    // A failing load is shown with what `fix` would repair (a second diff, only then).
    options.previewRepair = !o.against;
    auto strictness = strictnessFromName(o.strictness);
    if (!strictness)
        return fail(
            makeError(Error::Code::Format, "unknown --strictness '" + o.strictness +
                                               "' (see Megatron's --dist-ckpt-strictness)"));
    options.strictness = *strictness;

    if (o.values && !o.reportPath)
        return runValues(o);
    if (o.reportPath) {
        ReportRequest request;
        auto format = reportFormatForPath(*o.reportPath);
        if (!format)
            return fail(makeError(Error::Code::Format, "report must end in .md, .html or .json")
                            .inFile(*o.reportPath));
        request.format = *format;
        request.context = {o.commandLine, {}};
        // Against a checkpoint (its values too with --values), or else against the layout.
        if (o.against) {
            request.against =
                CheckpointDiffRequest{o.checkpoint, *o.against, options, nullptr, nullptr};
            if (o.values)
                request.values = valueRequest(o);
        } else {
            auto source = layoutSource(o);
            if (!source)
                return fail(source.error());
            request.diff = DiffRequest{o.checkpoint, source->path,  options,
                                       nullptr,      source->built, source->command};
        }
        auto report = runReport(request);
        if (!report)
            return fail(report.error());
        if (auto error = writeFileAtomically(*o.reportPath, report->text))
            return fail(*error);
        std::cerr << "wrote " << visibleName(*o.reportPath) << "\n";
        return report->clean ? ExitHealthy : ExitProblems;
    }

    if (o.against) {
        auto d = runCheckpointDiff({o.checkpoint, *o.against, options, nullptr, nullptr});
        if (!d)
            return fail(d.error());
        if (o.json) {
            std::cout << checkpointDiffToJson(*d);
        } else {
            std::cout << visibleName(d->first) << " against " << visibleName(d->second) << ": "
                      << d->same << " same, " << d->changes.size() << " changes\n";
            for (const KeyChange &c : d->changes) {
                std::cout << "  " << changeName(c.kind) << "  " << visibleName(c.key);
                if (!c.otherKey.empty())
                    std::cout << " -> " << visibleName(c.otherKey);
                if (!c.rule.empty())
                    std::cout << "  (rule " << visibleText(c.rule) << ")";
                if (!c.detail.empty())
                    std::cout << "  " << visibleText(c.detail);
                std::cout << "\n";
            }
        }
        return d->clean() ? ExitHealthy : ExitProblems;
    }

    auto source = layoutSource(o);
    if (!source)
        return fail(source.error());
    auto diff = shardscope::runDiff(
        {o.checkpoint, source->path, options, nullptr, source->built, source->command});
    if (!diff)
        return fail(diff.error());
    if (o.config.config)
        diff->against = *o.config.config + " (the layout built from it)";
    if (o.json)
        std::cout << diffToJson(*diff);
    else
        printDiff(*diff);
    return diff->passes() ? ExitHealthy : ExitProblems;
}

int runRules()
{
    for (const RuleInfo &r : allRules())
        std::cout << r.name << (r.appliedByLoader ? "  [Megatron load]  " : "  [ShardScope]     ")
                  << r.description << "\n";
    return ExitHealthy;
}

} // namespace shardscope::cli
