// SPDX-License-Identifier: MIT
// Reports as Markdown (CommonMark, GitHub tables).
#include "report/reportparts.h"

namespace shardscope::report {

std::string mdFix(std::string_view fix)
{
    return isCommand(fix) ? "\n\n" + mdBlock(fix) : " " + mdProse(fix) + "\n";
}

std::string mdKeyList(const KeyList &keys, size_t limit = kShownKeys)
{
    std::string out;
    size_t shown = 0, covered = 0;
    for (const PatternCount &p : keys.patterns) {
        if (shown == limit)
            break;
        out += (shown ? ", " : "") + mdCode(p.pattern);
        if (p.count > 1)
            out += " (" + std::to_string(p.count) + ")";
        ++shown;
        covered += p.count;
    }
    if (covered < keys.total)
        out += ", … and " + std::to_string(keys.total - covered) + " more";
    return out;
}

// One bullet per pattern; prefix "> " puts them in a block quote.
std::string mdPatternBullets(const KeyList &keys, std::string_view prefix)
{
    std::string out;
    for (const PatternCount &p : keys.patterns) {
        out += std::string(prefix) + "- " + mdCode(p.pattern);
        if (p.count > 1)
            out += " (" + std::to_string(p.count) + ")";
        out += "\n";
    }
    return out;
}

std::string mdReproduce(const ReportContext &ctx)
{
    std::string out = "## Reproduce\n\n";
    if (ctx.command.empty())
        return out + "The command was not recorded.\n";
    return out + mdBlock(ctx.command, "sh");
}

// What `fix` would do: its command, the keys it writes, what it cannot repair.
std::string mdRepair(const DiffResult &diff)
{
    if (!diff.repair)
        return {};
    const RepairPreview &r = *diff.repair;
    std::string md = "\n## Repair\n\n";
    if (r.command.empty())
        return md + mdProse(r.unsupported) + "\n";
    if (r.changes.empty() && r.blockers.empty())
        return md + "Nothing that a fix can repair.\n";
    std::string kinds;
    bool copies = false;
    for (const auto &[kind, n] : r.changes) {
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + mdEscape(kind);
        copies = copies || kind == "rewrite";
    }
    md += r.blockers.empty()
              ? (r.dataWritten.empty()
                     ? "This writes a checkpoint the load above accepts, beside the original: "
                       "new metadata over hard-linked data, " +
                           std::string(copies ? "the rewritten keys copied into one new data file"
                                              : "no tensor data copied")
                     : "This writes a checkpoint the load above accepts, beside the original: " +
                           mdEscape(r.dataWritten)) +
                    " (" + kinds + "):\n\n"
              : "This repairs what it can (" + (kinds.empty() ? "nothing" : kinds) +
                    "); it writes nothing while any parameter below cannot be repaired, and with "
                    "`--partial` what it can:\n\n";
    md += mdBlock(r.command, "sh");
    if (!r.blockers.empty()) {
        md += "\nIt cannot repair " + plural(r.blockers.size(), "entry", "entries") + ":\n\n";
        for (size_t i = 0; i < r.blockers.size() && i < 20; ++i)
            md += "- " + mdProse(r.blockers[i]) + "\n";
        if (r.blockers.size() > 20)
            md += "- … and " + std::to_string(r.blockers.size() - 20) + " more\n";
    }
    return md;
}

std::string markdownReport(const DiffResult &diff, const ReportContext &ctx)
{
    const DiffModel model = buildModel(diff);
    const DiffOptions &opt = diff.options;
    std::string md = "# ShardScope load report\n\n";
    md += "| | |\n|---|---|\n";
    md += "| Checkpoint | " + mdCode(diff.checkpoint, true) +
          (diff.format.empty() ? "" : " (" + mdCode(diff.format, true) + ")") + " |\n";
    if (diff.torchReadable.applies)
        md += "| Read by | " + mdProse(diff.torchReadable.explained()) + " |\n";
    md += "| Against | " + mdCode(diff.against, true) + " |\n";
    md += "| Strictness | " + mdCode(strictnessName(opt.strictness), true) + ", strict load " +
          (opt.strictLoad ? "on" : "off") + " |\n";
    md += std::string("| Optimizer | ") + (opt.includeOptimizer ? "included" : "not compared") +
          " |\n";
    if (!opt.disabledRules.empty()) {
        md += "| Disabled rules |";
        for (size_t i = 0; i < opt.disabledRules.size(); ++i)
            md += (i ? ", " : " ") + mdCode(opt.disabledRules[i], true);
        md += " |\n";
    }
    if (!ctx.generatedAt.empty())
        md += "| Generated | " + mdEscape(ctx.generatedAt) + " |\n";

    md += "\n## Summary\n\n";
    if (!model.keptAtInit.patterns.empty()) {
        md += "> [!CAUTION]\n> **" + keptHeadline(model.keptAtInit.total, diff.outcome.action) +
              ".** " + keptExplanation(diff.outcome.action) + "\n>\n";
        md += mdPatternBullets(model.keptAtInit, "> ");
        md += "\n";
    }
    if (!model.optimizerKeptAtInit.patterns.empty()) {
        md += "> [!WARNING]\n> **" + optimizerKeptHeadline(model.optimizerKeptAtInit.total) +
              ".**\n>\n";
        md += mdPatternBullets(model.optimizerKeptAtInit, "> ");
        md += "\n";
    }
    if (!diff.outcome.loadedWrong.empty()) {
        md += "> [!CAUTION]\n> **A load would silently fill " +
              plural(diff.outcome.loadedWrong.size(), "tensor", "tensors") +
              " from the wrong key** (another stage's layers, another EP rank's experts).\n>\n";
        md += mdPatternBullets(foldKeys(diff.outcome.loadedWrong), "> ");
        md += "\n";
    }
    md += "- **Model:** " + std::to_string(diff.loadableModel) + " of " +
          plural(diff.expectedModel, "parameter", "parameters") + " loadable by a real load (" +
          percent(diff.loadableModel, diff.expectedModel) + ")\n";
    if (opt.includeOptimizer)
        md += "- **Optimizer:** " + std::to_string(diff.loadableOptimizer) + " of " +
              plural(diff.expectedOptimizer, "state", "states") + " loadable by a real load (" +
              percent(diff.loadableOptimizer, diff.expectedOptimizer) + ")\n";
    md += "- **Real load** (" + mdCode(strictnessFlag(opt)) +
          "): " + mdCode(actionName(diff.outcome.action)) + "\n";
    md += "- **Problems:** " + plural(model.problemEntries, "entry", "entries") + " in " +
          plural(model.groups.size(), "group", "groups") + "; " +
          plural(diff.unconsumed.size(), "checkpoint key", "checkpoint keys") + " unconsumed\n";
    md += std::string("- **Verdict:** ") +
          (!diff.passes()                  ? "not clean"
           : diff.outcome.warnings.empty() ? "clean"
                                           : "loads, with warnings") +
          "\n";
    for (const std::string &w : diff.outcome.warnings)
        md += "\n> [!WARNING]\n> " + mdProse(w) + "\n";
    if (model.keptAtInit.patterns.empty() && diff.outcome.action != LoadOutcome::Action::Raises)
        md += "\nNo parameter would be left at its initial value.\n";
    if (diff.outcome.action == LoadOutcome::Action::Raises)
        md += "\n> [!WARNING]\n> **A real load would stop with an exception.**\n";
    if (!diff.outcome.message.empty())
        md += "\nWhat the load would report:\n\n" + mdBlock(diff.outcome.message);
    if (!model.namedKeys.patterns.empty())
        md += "\nKeys it names: " + mdKeyList(model.namedKeys, 20) + "\n";

    md += "\n## Problems\n\n";
    if (model.groups.empty())
        md += "None: every expected parameter loads as is.\n";
    else
        md += plural(model.problemEntries, "entry", "entries") +
              " that are not loadable as is, in " + plural(model.groups.size(), "group", "groups") +
              ".\n";
    for (size_t gi = 0; gi < model.groups.size(); ++gi) {
        const ProblemGroup &g = model.groups[gi];
        md += "\n### " + std::to_string(gi + 1) + ". " + mdCode(g.pattern) + "\n\n";
        md += mdCode(statusName(g.status)) + " · " +
              (g.fills ? "filled by a real load" : "**not filled by a real load**") + " · " +
              plural(g.entries.size(), std::string(sectionName(g.section)) + " entry",
                     std::string(sectionName(g.section)) + " entries");
        if (!g.shape.empty() || !g.dtype.empty())
            md +=
                " · expected " + (g.shape.empty() ? "" : mdCode(g.shape) + " ") + mdEscape(g.dtype);
        md += "\n\n";
        if (!g.reason.empty())
            md += "**Cause:** " + mdProse(g.reason) + "\n\n";
        if (!g.fix.empty()) {
            md += "**Fix:**" + mdFix(g.fix) + "\n";
            if (!g.fixExample.empty())
                md += "For " + mdCode(g.exampleName) + ":" + mdFix(g.fixExample) + "\n";
        }
        if (g.keys.total)
            md += "**On-disk keys:** " + mdKeyList(g.keys) + "\n\n";
        if (g.requested.total && !g.fills)
            md += "**Requested by a real load:** " + mdKeyList(g.requested) + "\n\n";
        while (md.size() > 1 && md[md.size() - 1] == '\n' && md[md.size() - 2] == '\n')
            md.pop_back();
    }

    md += mdRepair(diff);
    md += "\n## Unconsumed checkpoint keys\n\n";
    if (model.unconsumed.empty()) {
        md += "None: every checkpoint key is used.\n";
    } else {
        md += plural(diff.unconsumed.size(), "key", "keys") +
              " that no expected parameter consumes (a plain DCP load ignores them silently).\n\n";
        for (const UnconsumedGroup &u : model.unconsumed) {
            md += "- " + mdCode(u.pattern);
            if (u.count > 1)
                md += " (" + std::to_string(u.count) + ")";
            if (!u.tensor)
                md += " — object";
            else if (!u.shape.empty() || !u.dtype.empty())
                md += " — " + (u.shape.empty() ? "" : mdCode(u.shape) + " ") + mdEscape(u.dtype);
            if (!u.note.empty())
                md += ": " + mdProse(u.note);
            md += "\n";
        }
    }
    md += "\n" + mdReproduce(ctx);
    return md;
}

namespace {

// The value differences: a summary line, then each group, the worst first.
std::string mdValues(const ValueDiffResult &v)
{
    std::string md = "\n## Value differences\n\n" + mdEscape(valueSummary(v)) + " (tolerance " +
                     (v.rtol == 0 && v.atol == 0
                          ? std::string("bit-exact")
                          : "rtol " + std::to_string(v.rtol) + ", atol " + std::to_string(v.atol)) +
                     "; names from " + mdCode(v.layout) + ").\n\n";
    md += "| Verdict | Tensors | Figures (the worst) |\n|---|---|---|\n";
    for (const ValueGroup &g : valueGroups(v)) {
        const TensorValueDiff &w = v.tensors[g.worst];
        md += "| " + mdCode(verdictName(g.verdict), true) + " | " + mdCode(g.pattern, true) +
              (g.members.size() > 1 ? " (" + std::to_string(g.members.size()) + ")" : "") + " | " +
              mdEscape(oneLine(valueFigures(w))) + " |\n";
    }
    return md;
}

} // namespace

std::string markdownCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx,
                                     const ValueDiffResult *values)
{
    const auto groups = foldKeyChanges(diff);
    std::string md = "# ShardScope checkpoint comparison\n\n| | |\n|---|---|\n";
    md += "| First | " + mdCode(diff.first, true) + " |\n";
    if (diff.firstTorch.applies)
        md += "| First read by | " + mdProse(diff.firstTorch.explained()) + " |\n";
    md += "| Second | " + mdCode(diff.second, true) + " |\n";
    if (diff.secondTorch.applies)
        md += "| Second read by | " + mdProse(diff.secondTorch.explained()) + " |\n";
    if (!ctx.generatedAt.empty())
        md += "| Generated | " + mdEscape(ctx.generatedAt) + " |\n";
    md += "\n## Summary\n\n| Change | Keys |\n|---|---:|\n";
    md += "| same | " + std::to_string(diff.same) + " |\n";
    for (KeyChange::Kind k : kKinds)
        md +=
            "| " + mdCode(changeName(k), true) + " | " + std::to_string(countOf(diff, k)) + " |\n";
    md += "\n## Changes\n\n";
    if (groups.empty())
        md += "None: the checkpoints hold the same keys, shapes and dtypes.\n";
    else
        md += plural(diff.changes.size(), "change", "changes") + " in " +
              plural(groups.size(), "group", "groups") + ".\n\n";
    for (const ChangeGroup &g : groups) {
        md += "- " + mdCode(changeName(g.kind)) + " " + mdCode(g.pattern);
        if (!g.otherPattern.empty() && g.otherPattern != g.pattern)
            md += " → " + mdCode(g.otherPattern);
        if (g.changes.size() > 1)
            md += " (" + std::to_string(g.changes.size()) + ")";
        if (!g.rule.empty())
            md += ", rule " + mdCode(g.rule);
        if (!g.detail.empty())
            md += ": " + mdProse(g.detail);
        md += "\n";
    }
    if (values)
        md += mdValues(*values);
    return md + "\n" + mdReproduce(ctx);
}
} // namespace shardscope::report
