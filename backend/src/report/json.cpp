// SPDX-License-Identifier: MIT
// The diff JSON schemas: shardscope.diff/1, shardscope.checkpoint-diff/1, shardscope.report/1.
#include "report/reportparts.h"

#include "common/shapes.h"

namespace shardscope::report {

using detail::shapeText;

std::string dump(const json &j)
{
    // Keys from a checkpoint need not be UTF-8; dump() would throw on them.
    return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

json keyListJson(const KeyList &keys)
{
    json a = json::array();
    for (const PatternCount &p : keys.patterns)
        a.push_back({{"pattern", p.pattern}, {"count", p.count}});
    return a;
}

json diffJson(const DiffResult &diff)
{
    json entries = json::array();
    for (const DiffEntry &e : diff.entries) {
        json sources = json::array();
        for (const DiffSource &s : e.sources)
            sources.push_back({{"key", s.key},
                               {"shape", s.shape},
                               {"dtype", s.dtype},
                               {"dim", s.dim},
                               {"begin", s.begin},
                               {"end", s.end},
                               {"stored_row", s.storedRow},
                               {"index", s.index}});
        json entry = {{"section", sectionName(e.section)},
                      {"name", e.name},
                      {"param", e.param},
                      {"state", e.state},
                      {"shape", e.shape},
                      {"dtype", e.dtype},
                      {"status", statusName(e.status)},
                      {"real_load_fills", e.realLoadFills},
                      {"rules", e.rules},
                      {"sources", std::move(sources)},
                      {"request_keys", e.requestKeys},
                      {"reason", e.reason},
                      {"fix", e.fix}};
        if (!e.unreadKeys.empty())
            entry["unread_keys"] = e.unreadKeys;
        if (!e.requestRows.empty()) {
            json rows = json::array();
            for (const DiffSource &r : e.requestRows) {
                rows.push_back({{"key", r.key},
                                {"shape", r.shape},
                                {"dim", r.dim},
                                {"begin", r.begin},
                                {"end", r.end}});
                if (!r.index.empty()) // a stacked key: where the piece goes on its leading axes
                    rows.back()["index"] = r.index;
            }
            entry["request_rows"] = std::move(rows);
        }
        if (e.narrowing)
            entry["narrowing"] = true;
        if (e.castLoss)
            entry["cast_loss"] = {
                {"max_abs", e.castLoss->maxAbs},         {"max_rel", e.castLoss->maxRel},
                {"changed", e.castLoss->changed},        {"count", e.castLoss->count},
                {"worst_index", e.castLoss->worstIndex}, {"worst_value", e.castLoss->worstValue}};
        if (!e.looksInitial.empty())
            entry["looks_initial"] = e.looksInitial;
        if (!e.tiedTo.empty())
            entry["tied_to"] = e.tiedTo;
        entries.push_back(std::move(entry));
    }
    json unconsumed = json::array();
    for (const UnconsumedKey &u : diff.unconsumed)
        unconsumed.push_back({{"key", u.key},
                              {"shape", u.shape},
                              {"dtype", u.dtype},
                              {"tensor", u.tensor},
                              {"note", u.note},
                              {"redundant", u.redundant}});
    const LoadOutcome &o = diff.outcome;
    const DiffOptions &opt = diff.options;
    json repair = nullptr;
    if (diff.repair) {
        json changes = json::object();
        for (const auto &[kind, n] : diff.repair->changes)
            changes[kind] = n;
        repair = {{"command", diff.repair->command},
                  {"unsupported", diff.repair->unsupported},
                  {"changes", std::move(changes)},
                  {"blockers", diff.repair->blockers}};
    }
    json out = {{"schema", "shardscope.diff/1"},
                {"checkpoint", diff.checkpoint},
                {"against", diff.against},
                {"format", diff.format},
                {"options",
                 {{"disabled_rules", opt.disabledRules},
                  {"strictness", strictnessName(opt.strictness)},
                  {"strict_load", opt.strictLoad},
                  {"include_optimizer", opt.includeOptimizer},
                  {"measure_casts", opt.measureCasts},
                  {"fail_on_cast", opt.failOnCast},
                  {"check_init", opt.checkInit}}},
                {"counts",
                 {{"expected_model", diff.expectedModel},
                  {"loadable_model", diff.loadableModel},
                  {"expected_optimizer", diff.expectedOptimizer},
                  {"loadable_optimizer", diff.loadableOptimizer}}},
                {"clean", diff.clean()},
                {"outcome",
                 {{"action", actionName(o.action)},
                  {"message", o.message},
                  {"named_keys", o.namedKeys},
                  {"kept_at_init", o.keptAtInit},
                  {"optimizer_kept_at_init", o.optimizerKeptAtInit},
                  {"loaded_wrong", o.loadedWrong},
                  {"warnings", o.warnings},
                  {"lossy_casts", diff.lossyCasts}}},
                {"passes", diff.passes()},
                {"entries", std::move(entries)},
                {"unconsumed", std::move(unconsumed)}};
    if (diff.torchReadable.applies)
        out["torch_readable"] = torchReadableJson(diff.torchReadable);
    out["repair"] = std::move(repair);
    return out;
}

std::string jsonReport(const DiffResult &diff, const ReportContext &ctx)
{
    const DiffModel model = buildModel(diff);
    const DiffOptions &opt = diff.options;
    json groups = json::array();
    for (const ProblemGroup &g : model.groups)
        groups.push_back({{"section", sectionName(g.section)},
                          {"status", statusName(g.status)},
                          {"real_load_fills", g.fills},
                          {"pattern", g.pattern},
                          {"count", g.entries.size()},
                          {"shape", g.shape},
                          {"dtype", g.dtype},
                          {"reason", g.reason},
                          {"fix", g.fix},
                          {"fix_example", g.fixExample},
                          {"keys", keyListJson(g.keys)},
                          {"keys_total", g.keys.total},
                          {"request_keys", keyListJson(g.requested)},
                          {"request_keys_total", g.requested.total}});
    json unconsumed = json::array();
    for (const UnconsumedGroup &u : model.unconsumed)
        unconsumed.push_back({{"pattern", u.pattern},
                              {"count", u.count},
                              {"tensor", u.tensor},
                              {"shape", u.shape},
                              {"dtype", u.dtype},
                              {"note", u.note}});
    json summary = {
        {"checkpoint", diff.checkpoint},
        {"against", diff.against},
        {"format", diff.format},
        {"torch_readable",
         diff.torchReadable.applies ? torchReadableJson(diff.torchReadable) : json(nullptr)},
        {"strictness", strictnessName(opt.strictness)},
        {"strict_load", opt.strictLoad},
        {"include_optimizer", opt.includeOptimizer},
        {"model", {{"expected", diff.expectedModel}, {"loadable", diff.loadableModel}}},
        {"optimizer", {{"expected", diff.expectedOptimizer}, {"loadable", diff.loadableOptimizer}}},
        {"action", actionName(diff.outcome.action)},
        {"message", diff.outcome.message},
        {"kept_at_init", keyListJson(model.keptAtInit)},
        {"kept_at_init_total", model.keptAtInit.total},
        {"optimizer_kept_at_init", keyListJson(model.optimizerKeptAtInit)},
        {"optimizer_kept_at_init_total", model.optimizerKeptAtInit.total},
        {"problem_entries", model.problemEntries},
        {"unconsumed_keys", diff.unconsumed.size()},
        {"clean", diff.clean()}};
    return dump({{"schema", "shardscope.report/1"},
                 {"command", ctx.command},
                 {"generated_at", ctx.generatedAt},
                 {"summary", std::move(summary)},
                 {"groups", std::move(groups)},
                 {"unconsumed", std::move(unconsumed)},
                 {"diff", diffJson(diff)}});
}

json checkpointDiffJson(const CheckpointDiff &diff)
{
    json counts = json::object();
    for (KeyChange::Kind k : kKinds)
        counts[std::string(changeName(k))] = countOf(diff, k);
    json changes = json::array();
    for (const KeyChange &c : diff.changes)
        changes.push_back({{"kind", changeName(c.kind)},
                           {"key", c.key},
                           {"other_key", c.otherKey},
                           {"rule", c.rule},
                           {"detail", c.detail}});
    return {{"schema", "shardscope.checkpoint-diff/1"},
            {"first", diff.first},
            {"second", diff.second},
            {"first_torch_readable",
             diff.firstTorch.applies ? torchReadableJson(diff.firstTorch) : json(nullptr)},
            {"second_torch_readable",
             diff.secondTorch.applies ? torchReadableJson(diff.secondTorch) : json(nullptr)},
            {"same", diff.same},
            {"counts", std::move(counts)},
            {"changes", std::move(changes)}};
}

std::string jsonCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx,
                                 const ValueDiffResult *values)
{
    json groups = json::array();
    for (const ChangeGroup &g : foldKeyChanges(diff))
        groups.push_back({{"kind", changeName(g.kind)},
                          {"pattern", g.pattern},
                          {"other_pattern", g.otherPattern},
                          {"rule", g.rule},
                          {"detail", g.detail},
                          {"count", g.changes.size()}});
    json summary = {{"first", diff.first},
                    {"second", diff.second},
                    {"same", diff.same},
                    {"changes", diff.changes.size()}};
    for (KeyChange::Kind k : kKinds)
        summary[std::string(changeName(k))] = countOf(diff, k);
    return dump({{"schema", "shardscope.report/1"},
                 {"command", ctx.command},
                 {"generated_at", ctx.generatedAt},
                 {"summary", std::move(summary)},
                 {"groups", std::move(groups)},
                 {"diff", checkpointDiffJson(diff)},
                 {"values", values ? json::parse(valueDiffToJson(*values)) : json(nullptr)}});
}
} // namespace shardscope::report
