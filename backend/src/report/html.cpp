// SPDX-License-Identifier: MIT
// Reports as one self-contained HTML file: inline CSS, no scripts, nothing fetched.
#include "report/reportparts.h"

#include "shardscope/escape.h"

#include "common/shapes.h"

namespace shardscope::report {

using detail::shapeText;

// Badge colours: a class per meaning, never derived from the names diff.cpp prints.
std::string_view statusClass(LoadStatus s)
{
    switch (s) {
    case LoadStatus::Ok:
        return "b-ok";
    case LoadStatus::Split:
    case LoadStatus::Merge:
    case LoadStatus::Rename:
    case LoadStatus::Cast:
        return "b-info";
    case LoadStatus::Partial:
        return "b-warn";
    case LoadStatus::ShapeMismatch:
    case LoadStatus::Unloadable:
    case LoadStatus::Unreadable:
    case LoadStatus::WrongSource:
        return "b-bad";
    }
    return "b-bad";
}

std::string_view actionClass(const LoadOutcome &o)
{
    if (o.action == LoadOutcome::Action::Raises || !o.keptAtInit.empty())
        return "b-bad";
    if (o.action == LoadOutcome::Action::Loads && o.optimizerKeptAtInit.empty())
        return "b-ok";
    return "b-warn";
}

std::string_view changeClass(KeyChange::Kind k)
{
    switch (k) {
    case KeyChange::Kind::Added:
        return "b-info";
    case KeyChange::Kind::Renamed:
    case KeyChange::Kind::DtypeChanged:
        return "b-warn";
    case KeyChange::Kind::Removed:
    case KeyChange::Kind::ShapeChanged:
        return "b-bad";
    }
    return "b-bad";
}

constexpr std::string_view kCss = R"css(
:root{--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--border:#d1d9e0;
--ok:#1a7f37;--okbg:#dafbe1;--info:#0969da;--infobg:#ddf4ff;--warn:#9a6700;--warnbg:#fff8c5;
--bad:#cf222e;--badbg:#ffebe9}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;
--panel:#151b23;--border:#3d444d;--ok:#3fb950;--okbg:#12261e;--info:#4493f8;--infobg:#121d2f;
--warn:#d29922;--warnbg:#272115;--bad:#f85149;--badbg:#25171c}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:24px 28px 40px}
h1{font-size:24px;margin:0 0 2px}
h2{font-size:18px;margin:32px 0 12px;padding-bottom:6px;border-bottom:1px solid var(--border)}
code,pre{font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
code{background:var(--panel);border-radius:4px;padding:1px 4px;overflow-wrap:anywhere}
pre{background:var(--panel);border:1px solid var(--border);border-radius:6px;padding:10px 12px;
margin:4px 0;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{background:none;padding:0}
.meta,.muted{color:var(--muted)}
.meta{margin:0 0 18px}
table.kv{border-collapse:collapse}
.kv th{text-align:left;color:var(--muted);font-weight:600;padding:3px 18px 3px 0;
vertical-align:top;white-space:nowrap}
.kv td{padding:3px 0}
table.counts{border-collapse:collapse;min-width:280px}
.counts th,.counts td{border-bottom:1px solid var(--border);padding:5px 12px;text-align:left}
.counts td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(210px,1fr));gap:12px;
margin:18px 0}
.card{border:1px solid var(--border);border-radius:8px;padding:12px 14px;background:var(--panel)}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:22px;font-weight:600;font-variant-numeric:tabular-nums}
.bar{height:6px;border-radius:3px;background:var(--border);overflow:hidden;margin-top:8px}
.bar>span{display:block;height:100%;background:var(--ok)}
.bar.partial>span{background:var(--warn)}
.badge{display:inline-block;padding:0 8px;border-radius:999px;font-size:12px;font-weight:600;
line-height:20px;border:1px solid currentColor;white-space:nowrap}
.b-ok{color:var(--ok);background:var(--okbg)}
.b-info{color:var(--info);background:var(--infobg)}
.b-warn{color:var(--warn);background:var(--warnbg)}
.b-bad{color:var(--bad);background:var(--badbg)}
.alert{border:1px solid var(--bad);border-left-width:5px;background:var(--badbg);
border-radius:6px;padding:12px 16px;margin:16px 0}
.alert.warn{border-color:var(--warn);background:var(--warnbg)}
.alert.ok{border-color:var(--ok);background:var(--okbg)}
.alert h3{margin:0 0 6px;font-size:16px}
.alert p{margin:4px 0}
.alert ul{margin:6px 0 0;padding-left:20px}
details.group{border:1px solid var(--border);border-radius:8px;margin:8px 0}
details.group>summary{cursor:pointer;list-style:none;padding:8px 12px;display:flex;gap:8px;
align-items:center;flex-wrap:wrap}
details.group>summary::-webkit-details-marker{display:none}
details.group>summary::before{content:"\25B8";color:var(--muted);width:1em}
details.group[open]>summary::before{content:"\25BE"}
details.group[open]>summary{border-bottom:1px solid var(--border);background:var(--panel);
border-radius:8px 8px 0 0}
details.group>summary code{font-weight:600}
.count{margin-left:auto;color:var(--muted);white-space:nowrap}
.body{padding:10px 14px}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:8px 18px;margin:0}
dt{color:var(--muted);font-weight:600}
dd{margin:0;min-width:0}
ul.keys{margin:0;padding-left:18px}
footer{margin-top:36px;color:var(--muted);font-size:12px}
)css";

std::string htmlHead(std::string_view title)
{
    std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                    "<title>" +
                    htmlEscape(title) + "</title>\n<style>" + std::string(kCss) +
                    "</style>\n</head>\n<body>\n<main>\n";
    return h;
}

std::string htmlTail()
{
    return "<footer>Generated by ShardScope. This file is self-contained: it loads nothing "
           "from the network.</footer>\n</main>\n</body>\n</html>\n";
}

std::string hCode(std::string_view s)
{
    return "<code>" + htmlEscape(visibleText(s)) + "</code>"; // a name: one line
}

std::string hBadge(std::string_view cls, std::string_view text)
{
    return "<span class=\"badge " + std::string(cls) + "\">" + htmlEscape(text) + "</span>";
}

std::string hPre(std::string_view s)
{
    return "<pre><code>" + htmlEscape(s) + "</code></pre>";
}

std::string hFix(std::string_view fix)
{
    return isCommand(fix) ? hPre(fix) : "<div>" + htmlProse(fix) + "</div>";
}

std::string hKeyList(const KeyList &keys, size_t limit = kShownKeys)
{
    std::string out = "<ul class=\"keys\">";
    size_t shown = 0, covered = 0;
    for (const PatternCount &p : keys.patterns) {
        if (shown == limit)
            break;
        out += "<li>" + hCode(p.pattern);
        if (p.count > 1)
            out += " <span class=\"muted\">×" + std::to_string(p.count) + "</span>";
        out += "</li>";
        ++shown;
        covered += p.count;
    }
    if (covered < keys.total)
        out += "<li class=\"muted\">… and " + std::to_string(keys.total - covered) + " more</li>";
    return out + "</ul>";
}

std::string hCard(std::string_view label, std::string_view valueHtml, std::string_view extraHtml)
{
    return "<div class=\"card\"><div class=\"label\">" + htmlEscape(label) +
           "</div><div class=\"value\">" + std::string(valueHtml) + "</div>" +
           std::string(extraHtml) + "</div>\n";
}

std::string hBar(size_t part, size_t whole)
{
    const int pct = whole ? int(100.0 * double(part) / double(whole) + 0.5) : 100;
    return std::string("<div class=\"bar") + (part < whole ? " partial" : "") +
           "\"><span style=\"width:" + std::to_string(pct) + "%\"></span></div>";
}

std::string hReproduce(const ReportContext &ctx)
{
    std::string out = "<section>\n<h2>Reproduce</h2>\n";
    if (ctx.command.empty())
        out += "<p class=\"muted\">The command was not recorded.</p>\n";
    else
        out += hPre(ctx.command) + "\n";
    return out + "</section>\n";
}

// What `fix` would do: its command, the keys it writes, what it cannot repair.
std::string hRepair(const DiffResult &diff)
{
    if (!diff.repair)
        return {};
    const RepairPreview &r = *diff.repair;
    std::string h = "<section>\n<h2>Repair</h2>\n";
    if (r.command.empty())
        return h + "<p>" + htmlProse(r.unsupported) + "</p>\n</section>\n";
    if (r.changes.empty() && r.blockers.empty())
        return h + "<p>Nothing that a fix can repair.</p>\n</section>\n";
    std::string kinds;
    bool copies = false;
    for (const auto &[kind, n] : r.changes) {
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + htmlEscape(kind);
        copies = copies || kind == "rewrite";
    }
    h +=
        r.blockers.empty()
            ? "<p>This writes a checkpoint the load above accepts, beside the original: " +
                  (r.dataWritten.empty()
                       ? "new metadata over hard-linked data, " +
                             std::string(copies ? "the rewritten keys copied into one new data file"
                                                : "no tensor data copied")
                       : htmlEscape(r.dataWritten)) +
                  " (" + kinds + "):</p>\n"
            : "<p>This repairs what it can (" + (kinds.empty() ? "nothing" : kinds) +
                  "); it writes nothing while any parameter below cannot be repaired, and with "
                  "<code>--partial</code> what it can:</p>\n";
    h += hPre(r.command) + "\n";
    if (!r.blockers.empty()) {
        h += "<p>It cannot repair " + plural(r.blockers.size(), "entry", "entries") +
             ":</p>\n<ul>\n";
        for (size_t i = 0; i < r.blockers.size() && i < 20; ++i)
            h += "<li>" + htmlProse(r.blockers[i]) + "</li>\n";
        if (r.blockers.size() > 20)
            h += "<li>… and " + std::to_string(r.blockers.size() - 20) + " more</li>\n";
        h += "</ul>\n";
    }
    return h + "</section>\n";
}

std::string htmlReport(const DiffResult &diff, const ReportContext &ctx)
{
    const DiffModel model = buildModel(diff);
    const DiffOptions &opt = diff.options;
    const LoadOutcome &outcome = diff.outcome;
    std::string h = htmlHead("ShardScope load report — " + diff.checkpoint);
    h += "<h1>ShardScope load report</h1>\n<p class=\"meta\">Checkpoint against layout";
    if (!ctx.generatedAt.empty())
        h += " · generated " + htmlEscape(ctx.generatedAt);
    h += "</p>\n<table class=\"kv\"><tbody>\n";
    h += "<tr><th>Checkpoint</th><td>" + hCode(diff.checkpoint) +
         (diff.format.empty() ? ""
                              : " <span class=\"muted\">" + htmlEscape(diff.format) + "</span>") +
         "</td></tr>\n";
    if (diff.torchReadable.applies)
        h +=
            "<tr><th>Read by</th><td>" + htmlProse(diff.torchReadable.explained()) + "</td></tr>\n";
    h += "<tr><th>Against</th><td>" + hCode(diff.against) + "</td></tr>\n";
    h += "<tr><th>Real load</th><td>" + hCode(strictnessFlag(opt)) + "</td></tr>\n";
    h += std::string("<tr><th>Optimizer</th><td>") +
         (opt.includeOptimizer ? "included" : "not compared") + "</td></tr>\n";
    if (!opt.disabledRules.empty()) {
        h += "<tr><th>Disabled rules</th><td>";
        for (size_t i = 0; i < opt.disabledRules.size(); ++i)
            h += (i ? ", " : "") + hCode(opt.disabledRules[i]);
        h += "</td></tr>\n";
    }
    h += "<tr><th>Verdict</th><td>" +
         (diff.clean() ? hBadge("b-ok", "clean") : hBadge("b-bad", "not clean")) +
         "</td></tr>\n</tbody></table>\n";

    h += "<section>\n<h2>Summary</h2>\n";
    if (!model.keptAtInit.patterns.empty()) {
        h += "<div class=\"alert\"><h3>⚠ " +
             htmlEscape(keptHeadline(model.keptAtInit.total, outcome.action)) + "</h3><p>" +
             htmlEscape(keptExplanation(outcome.action)) + "</p>" +
             hKeyList(model.keptAtInit, model.keptAtInit.patterns.size()) + "</div>\n";
    }
    if (!model.optimizerKeptAtInit.patterns.empty()) {
        h += "<div class=\"alert warn\"><h3>" +
             htmlEscape(optimizerKeptHeadline(model.optimizerKeptAtInit.total)) + "</h3>" +
             hKeyList(model.optimizerKeptAtInit, model.optimizerKeptAtInit.patterns.size()) +
             "</div>\n";
    }
    if (!outcome.loadedWrong.empty()) {
        const KeyList wrong = foldKeys(outcome.loadedWrong);
        h += "<div class=\"alert\"><h3>⚠ " +
             htmlEscape("A load would silently fill " +
                        plural(outcome.loadedWrong.size(), "tensor", "tensors") +
                        " from the wrong key (another stage's layers, another EP rank's "
                        "experts)") +
             "</h3>" + hKeyList(wrong, wrong.patterns.size()) + "</div>\n";
    }
    h += "<div class=\"cards\">\n";
    h += hCard("Model parameters loadable",
               std::to_string(diff.loadableModel) + " <span class=\"muted\">/ " +
                   std::to_string(diff.expectedModel) + "</span>",
               hBar(diff.loadableModel, diff.expectedModel));
    if (opt.includeOptimizer)
        h += hCard("Optimizer states loadable",
                   std::to_string(diff.loadableOptimizer) + " <span class=\"muted\">/ " +
                       std::to_string(diff.expectedOptimizer) + "</span>",
                   hBar(diff.loadableOptimizer, diff.expectedOptimizer));
    h += hCard("Real load", hBadge(actionClass(outcome), actionName(outcome.action)),
               "<div class=\"muted\">" + htmlEscape(strictnessName(opt.strictness)) + "</div>");
    h += hCard("Unconsumed keys", std::to_string(diff.unconsumed.size()),
               "<div class=\"muted\">ignored by a plain load</div>");
    h += "</div>\n";
    for (const std::string &w : outcome.warnings)
        h += "<div class=\"alert warn\"><p>" + htmlProse(w) + "</p></div>\n";
    if (model.keptAtInit.patterns.empty() && outcome.action != LoadOutcome::Action::Raises)
        h += "<div class=\"alert ok\"><p>No parameter would be left at its initial "
             "value.</p></div>\n";
    if (outcome.action == LoadOutcome::Action::Raises)
        h += "<div class=\"alert warn\"><h3>A real load would stop with an exception</h3>" +
             (outcome.message.empty() ? "" : hPre(outcome.message)) + "</div>\n";
    else if (!outcome.message.empty())
        h += "<p>What the load would report:</p>\n" + hPre(outcome.message) + "\n";
    if (!model.namedKeys.patterns.empty())
        h += "<p>Keys it names:</p>\n" + hKeyList(model.namedKeys, 20) + "\n";
    h += "</section>\n";

    h += "<section>\n<h2>Problems</h2>\n";
    if (model.groups.empty())
        h += "<p>None: every expected parameter loads as is.</p>\n";
    else
        h += "<p>" + plural(model.problemEntries, "entry", "entries") +
             " that are not loadable as is, in " + plural(model.groups.size(), "group", "groups") +
             ".</p>\n";
    for (size_t gi = 0; gi < model.groups.size(); ++gi) {
        const ProblemGroup &g = model.groups[gi];
        h += std::string("<details class=\"group\"") + (!g.fills && gi < 5 ? " open" : "") +
             "><summary>" + hBadge(statusClass(g.status), statusName(g.status)) +
             (g.fills ? "" : hBadge("b-bad", "not filled by a real load")) + hCode(g.pattern) +
             "<span class=\"count\">" +
             plural(g.entries.size(), std::string(sectionName(g.section)) + " entry",
                    std::string(sectionName(g.section)) + " entries") +
             "</span></summary>\n<div class=\"body\"><dl>\n";
        h += std::string("<dt>Real load</dt><dd>") +
             (g.fills ? "fills it (its handlers apply every rule used)" : "does not fill it") +
             "</dd>\n";
        if (!g.shape.empty() || !g.dtype.empty())
            h += "<dt>Expected</dt><dd>" + (g.shape.empty() ? "" : hCode(g.shape) + " ") +
                 htmlEscape(g.dtype) + "</dd>\n";
        if (!g.reason.empty())
            h += "<dt>Cause</dt><dd>" + htmlProse(g.reason) + "</dd>\n";
        if (!g.fix.empty()) {
            h += "<dt>Fix</dt><dd>" + hFix(g.fix);
            if (!g.fixExample.empty())
                h += "<div class=\"muted\">For " + hCode(g.exampleName) + ":</div>" +
                     hFix(g.fixExample);
            h += "</dd>\n";
        }
        if (g.keys.total)
            h += "<dt>On-disk keys</dt><dd>" + hKeyList(g.keys) + "</dd>\n";
        if (g.requested.total && !g.fills)
            h += "<dt>Requested by a real load</dt><dd>" + hKeyList(g.requested) + "</dd>\n";
        h += "</dl></div>\n</details>\n";
    }
    h += "</section>\n";

    h += hRepair(diff);
    h += "<section>\n<h2>Unconsumed checkpoint keys</h2>\n";
    if (model.unconsumed.empty()) {
        h += "<p>None: every checkpoint key is used.</p>\n";
    } else {
        h += "<p>" + plural(diff.unconsumed.size(), "key", "keys") +
             " that no expected parameter consumes (a plain DCP load ignores them "
             "silently).</p>\n<table class=\"counts\"><thead><tr><th>Key</th><th>Count</th>"
             "<th>Stored</th><th>Note</th></tr></thead><tbody>\n";
        for (const UnconsumedGroup &u : model.unconsumed) {
            h += "<tr><td>" + hCode(u.pattern) + "</td><td class=\"n\">" + std::to_string(u.count) +
                 "</td><td>";
            if (!u.tensor)
                h += "object";
            else
                h += (u.shape.empty() ? "" : hCode(u.shape) + " ") + htmlEscape(u.dtype);
            h += "</td><td>" + htmlProse(u.note) + "</td></tr>\n";
        }
        h += "</tbody></table>\n";
    }
    h += "</section>\n";
    h += hReproduce(ctx);
    return h + htmlTail();
}

// The value differences: a summary, then each group, the worst first.
std::string hValues(const ValueDiffResult &v)
{
    using V = TensorValueDiff::Verdict;
    std::string h =
        "<section>\n<h2>Value differences</h2>\n<p>" + htmlEscape(valueSummary(v)) +
        " · tolerance " +
        htmlEscape(v.rtol == 0 && v.atol == 0
                       ? std::string("bit-exact")
                       : "rtol " + std::to_string(v.rtol) + ", atol " + std::to_string(v.atol)) +
        " · names from " + hCode(v.layout) + "</p>\n";
    for (const ValueGroup &g : valueGroups(v)) {
        const char *cls = g.verdict == V::Different     ? "b-bad"
                          : g.verdict == V::Within      ? "b-warn"
                          : g.verdict == V::NotCompared ? "b-warn"
                                                        : "b-ok";
        h += "<details class=\"group\"><summary>" + hBadge(cls, verdictName(g.verdict)) +
             hCode(g.pattern) + "<span class=\"count\">" +
             plural(g.members.size(), "tensor", "tensors") +
             "</span></summary>\n<div "
             "class=\"body\"><p>" +
             htmlEscape(valueFigures(v.tensors[g.worst])) + "</p></div>\n</details>\n";
    }
    return h + "</section>\n";
}

std::string htmlCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx,
                                 const ValueDiffResult *values)
{
    const auto groups = foldKeyChanges(diff);
    std::string h = htmlHead("ShardScope checkpoint comparison — " + diff.first);
    h += "<h1>ShardScope checkpoint comparison</h1>\n<p class=\"meta\">Checkpoint against "
         "checkpoint";
    if (!ctx.generatedAt.empty())
        h += " · generated " + htmlEscape(ctx.generatedAt);
    h += "</p>\n<table class=\"kv\"><tbody>\n";
    h += "<tr><th>First</th><td>" + hCode(diff.first) + "</td></tr>\n";
    if (diff.firstTorch.applies)
        h += "<tr><th>First read by</th><td>" + htmlProse(diff.firstTorch.explained()) +
             "</td></tr>\n";
    h += "<tr><th>Second</th><td>" + hCode(diff.second) + "</td></tr>\n";
    if (diff.secondTorch.applies)
        h += "<tr><th>Second read by</th><td>" + htmlProse(diff.secondTorch.explained()) +
             "</td></tr>\n";
    h += "<tr><th>Verdict</th><td>" +
         (diff.changes.empty() ? hBadge("b-ok", "same keys") : hBadge("b-warn", "changed")) +
         "</td></tr>\n</tbody></table>\n";
    h += "<section>\n<h2>Summary</h2>\n<table class=\"counts\"><thead><tr><th>Change</th>"
         "<th>Keys</th></tr></thead><tbody>\n";
    h += "<tr><td>" + hBadge("b-ok", "same") + "</td><td class=\"n\">" + std::to_string(diff.same) +
         "</td></tr>\n";
    for (KeyChange::Kind k : kKinds)
        h += "<tr><td>" + hBadge(changeClass(k), changeName(k)) + "</td><td class=\"n\">" +
             std::to_string(countOf(diff, k)) + "</td></tr>\n";
    h += "</tbody></table>\n</section>\n<section>\n<h2>Changes</h2>\n";
    if (groups.empty())
        h += "<p>None: the checkpoints hold the same keys, shapes and dtypes.</p>\n";
    else
        h += "<p>" + plural(diff.changes.size(), "change", "changes") + " in " +
             plural(groups.size(), "group", "groups") + ".</p>\n";
    for (const ChangeGroup &g : groups) {
        h += "<details class=\"group\"><summary>" +
             hBadge(changeClass(g.kind), changeName(g.kind)) + hCode(g.pattern);
        if (!g.otherPattern.empty() && g.otherPattern != g.pattern)
            h += "→" + hCode(g.otherPattern);
        h += "<span class=\"count\">" + plural(g.changes.size(), "key", "keys") +
             "</span></summary>\n<div class=\"body\"><dl>\n";
        h += "<dt>" + std::string(g.kind == KeyChange::Kind::Added ? "In second" : "In first") +
             "</dt><dd>" + hCode(g.pattern) + "</dd>\n";
        if (!g.otherPattern.empty())
            h += "<dt>In second</dt><dd>" + hCode(g.otherPattern) + "</dd>\n";
        if (!g.rule.empty())
            h += "<dt>Rule</dt><dd>" + hCode(g.rule) + "</dd>\n";
        if (!g.detail.empty())
            h += "<dt>Detail</dt><dd>" + htmlProse(g.detail) + "</dd>\n";
        h += "</dl></div>\n</details>\n";
    }
    h += "</section>\n";
    if (values)
        h += hValues(*values);
    h += hReproduce(ctx);
    return h + htmlTail();
}
} // namespace shardscope::report
