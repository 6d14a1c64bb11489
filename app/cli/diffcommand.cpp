// SPDX-License-Identifier: MIT
#include "diffcommand.h"
#include "difftext.h"
#include "frontdoor.h"
#include "inspectcommand.h"

#include <shardscope/escape.h>
#include <shardscope/session.h>
#include <shardscope/writefile.h>

#include <filesystem>
#include <iostream>
#include <tuple>

namespace shardscope::cli {

namespace {

int fail(const Error &e)
{
    std::cerr << "shardscope-cli: " << e.toString() << "\n";
    return ExitUnreadable;
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
    if (!o.config.config) {
        auto sent = sentLayout(*o.layout); // --ssh: a layout file here travels along
        if (!sent)
            return sent.error();
        return LayoutSource{*o.layout, *sent, {}};
    }
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

// --against with the sides in two places: each index opened where it lives (a remote one
// travels as its server's index, never its tensor data) and compared here.
Result<CheckpointDiffRequest> placedRequest(const DiffCommandOptions &o, const DiffOptions &options)
{
    CheckpointDiffRequest r{o.checkpoint, o.against.value_or(""), options, nullptr, nullptr};
    if (!o.acrossHosts)
        return r;
    for (auto [at, path, opened] : {std::tuple{o.checkpointAt, &r.first, &r.firstOpened},
                                    std::tuple{o.againstAt, &r.second, &r.secondOpened}}) {
        if (!at)
            continue;
        auto index = at->open(*path);
        if (!index)
            return index.error();
        *opened = std::move(*index);
    }
    return r;
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

    if (o.values && o.reportPath && o.acrossHosts)
        return fail(makeError(Error::Code::Unsupported,
                              "report --values compares element by element where both "
                              "checkpoints are; these are in two places (diff --values "
                              "compares them by each tensor's SHA-256)"));
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
            auto against = placedRequest(o, options);
            if (!against)
                return fail(against.error());
            request.against = std::move(*against);
            if (o.values) {
                request.values = valueRequest(o);
                if (o.layout) {
                    auto sent = sentLayout(*o.layout);
                    if (!sent)
                        return fail(sent.error());
                    request.values->openedLayout = *sent;
                }
            }
        } else {
            auto source = layoutSource(o);
            if (!source)
                return fail(source.error());
            request.diff = DiffRequest{o.checkpoint, source->path,  options,
                                       nullptr,      source->built, source->command};
        }
        auto report = jobs::report(request);
        if (!report)
            return fail(report.error());
        if (auto error = writeFileAtomically(*o.reportPath, report->text))
            return fail(*error);
        std::cerr << "wrote " << visibleName(*o.reportPath) << "\n";
        return report->clean ? ExitHealthy : ExitProblems;
    }

    if (o.against) {
        auto placed = placedRequest(o, options);
        if (!placed)
            return fail(placed.error());
        auto d = jobs::checkpointDiff(*placed);
        if (!d)
            return fail(d.error());
        if (o.json)
            std::cout << checkpointDiffToJson(*d);
        else
            printCheckpointDiffText(std::cout, *d, o.all);
        return d->clean() ? ExitHealthy : ExitProblems;
    }

    auto source = layoutSource(o);
    if (!source)
        return fail(source.error());
    auto diff =
        jobs::diff({o.checkpoint, source->path, options, nullptr, source->built, source->command});
    if (!diff)
        return fail(diff.error());
    if (o.config.config)
        diff->against = *o.config.config + " (the layout built from it)";
    if (o.json)
        std::cout << diffToJson(*diff);
    else
        printDiffText(std::cout, *diff, o.all);
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
