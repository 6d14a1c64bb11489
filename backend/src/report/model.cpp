// SPDX-License-Identifier: MIT
// The report model: problems, unconsumed keys and changes folded into groups, and the headlines
// every output format shares.
#include "report/reportparts.h"

#include "common/shapes.h"
#include "shardscope/keyfold.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace shardscope::report {

using detail::shapeText;

KeyList foldKeys(const std::vector<std::string> &keys)
{
    std::vector<std::string> unique;
    std::set<std::string_view> seen;
    for (const std::string &k : keys)
        if (seen.insert(k).second)
            unique.push_back(k);
    KeyList out;
    out.total = unique.size();
    for (auto &f : foldNames(unique))
        out.patterns.push_back({std::move(f.pattern), f.members.size()});
    return out;
}

// Items whose names and texts differ only in their numeric fields, folded. A group's names
// fold exactly; its texts field by field (they describe the names, mostly by the same numbers).
std::vector<FoldGroup> foldItems(const std::vector<FoldInput> &items)
{
    using Key =
        std::tuple<std::string, std::vector<std::string>, std::vector<std::vector<std::string>>>;
    std::map<Key, size_t> at;
    std::vector<std::vector<size_t>> buckets;
    for (size_t i = 0; i < items.size(); ++i) {
        std::vector<std::vector<std::string>> textPieces;
        for (const SplitName &t : items[i].texts)
            textPieces.push_back(t.pieces);
        Key key{items[i].category, splitName(items[i].name).pieces, std::move(textPieces)};
        auto [it, fresh] = at.try_emplace(std::move(key), buckets.size());
        if (fresh)
            buckets.emplace_back();
        buckets[it->second].push_back(i);
    }
    std::vector<FoldGroup> out;
    for (const auto &bucket : buckets) {
        std::vector<std::string> names;
        for (size_t i : bucket)
            names.push_back(items[i].name);
        for (const auto &folded : foldNames(names)) {
            FoldGroup g;
            g.pattern = folded.pattern;
            for (size_t m : folded.members)
                g.members.push_back(bucket[m]);
            const size_t nTexts = items[g.members.front()].texts.size();
            for (size_t t = 0; t < nTexts; ++t) {
                std::vector<SplitName> texts;
                for (size_t m : g.members)
                    texts.push_back(items[m].texts[t]);
                g.texts.push_back(foldTexts(texts));
            }
            out.push_back(std::move(g));
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const FoldGroup &a, const FoldGroup &b) {
        return a.members.front() < b.members.front();
    });
    return out;
}

DiffModel buildModel(const DiffResult &diff)
{
    DiffModel model;
    std::vector<size_t> problems;
    for (size_t i = 0; i < diff.entries.size(); ++i)
        if (isLoadProblem(diff.entries[i]))
            problems.push_back(i);
    model.problemEntries = problems.size();
    for (DiffEntryGroup &f : foldDiffEntries(diff, problems)) {
        ProblemGroup g;
        g.entries = std::move(f.entries);
        const DiffEntry &first = diff.entries[g.entries.front()];
        g.section = first.section;
        g.status = first.status;
        g.fills = first.realLoadFills;
        g.pattern = std::move(f.pattern);
        g.reason = std::move(f.reason);
        g.fix = std::move(f.fix);
        if (g.fix != first.fix) { // a pattern: show one runnable instance too
            g.fixExample = first.fix;
            g.exampleName = first.name;
        }
        g.shape = uniform(g.entries, [&](size_t i) { return shapeText(diff.entries[i].shape); });
        g.dtype = uniform(g.entries, [&](size_t i) { return diff.entries[i].dtype; });
        std::vector<std::string> keys, requested;
        for (size_t i : g.entries) {
            for (const DiffSource &s : diff.entries[i].sources)
                keys.push_back(s.key);
            for (const std::string &k : diff.entries[i].requestKeys)
                requested.push_back(k);
        }
        g.keys = foldKeys(keys);
        g.requested = foldKeys(requested);
        model.groups.push_back(std::move(g));
    }

    for (UnconsumedKeyGroup &f : foldUnconsumed(diff)) {
        UnconsumedGroup g;
        g.pattern = std::move(f.pattern);
        g.count = f.keys.size();
        g.tensor = diff.unconsumed[f.keys.front()].tensor;
        g.note = std::move(f.note);
        if (g.tensor) {
            g.shape =
                uniform(f.keys, [&](size_t i) { return shapeText(diff.unconsumed[i].shape); });
            g.dtype = uniform(f.keys, [&](size_t i) { return diff.unconsumed[i].dtype; });
        }
        model.unconsumed.push_back(std::move(g));
    }

    model.keptAtInit = foldKeys(diff.outcome.keptAtInit);
    model.optimizerKeptAtInit = foldKeys(diff.outcome.optimizerKeptAtInit);
    model.namedKeys = foldKeys(diff.outcome.namedKeys);
    return model;
}

std::string strictnessFlag(const DiffOptions &o)
{
    return "--dist-ckpt-strictness " + std::string(strictnessName(o.strictness)) +
           (o.strictLoad ? "" : " --no-strict-fsdp-dtensor-load");
}

std::string atInit(size_t n)
{
    return n == 1 ? " at its initial value" : " at their initial values";
}

std::string keptHeadline(size_t n, LoadOutcome::Action a)
{
    const bool logged = a == LoadOutcome::Action::LogsAndContinues;
    return std::string("A load would ") + (logged ? "" : "silently ") + "keep " +
           plural(n, "parameter", "parameters") + atInit(n);
}

std::string optimizerKeptHeadline(size_t n)
{
    return "A load would leave " + plural(n, "optimizer state", "optimizer states") + atInit(n);
}

std::string keptExplanation(LoadOutcome::Action a)
{
    switch (a) {
    case LoadOutcome::Action::LogsAndContinues:
        return "Megatron only logs a warning; training would go on with these weights untrained.";
    case LoadOutcome::Action::ReturnsAndContinues:
        return "Megatron only hands the keys back to its caller; training would go on with these "
               "weights untrained.";
    case LoadOutcome::Action::Silent:
        return "Nothing raises or logs: training would go on with these weights untrained.";
    default:
        return "The load does not fail on them: training would go on with these weights "
               "untrained.";
    }
}

// A fix that is a command line reads best as a code block, prose as prose.
bool isCommand(std::string_view fix)
{
    for (std::string_view tool :
         {"checkpoint_inspector.py", "shardscope-cli", "python", "torchrun"})
        if (fix.substr(0, tool.size()) == tool)
            return true;
    return fix.find('\n') != std::string_view::npos;
}

size_t countOf(const CheckpointDiff &diff, KeyChange::Kind k)
{
    return size_t(std::count_if(diff.changes.begin(), diff.changes.end(),
                                [k](const KeyChange &c) { return c.kind == k; }));
}
} // namespace shardscope::report

namespace shardscope {

using report::FoldInput;

std::vector<KeyChangeGroup> foldKeyChanges(const CheckpointDiff &diff)
{
    std::vector<FoldInput> items;
    for (const KeyChange &c : diff.changes)
        items.push_back({std::to_string(int(c.kind)) + "/" + c.rule,
                         c.key,
                         {splitName(c.otherKey), splitText(c.detail)}});
    std::vector<KeyChangeGroup> out;
    for (report::FoldGroup &f : report::foldItems(items)) {
        const KeyChange &first = diff.changes[f.members.front()];
        out.push_back({first.kind, first.rule, std::move(f.pattern), std::move(f.texts[0]),
                       std::move(f.texts[1]), std::move(f.members)});
    }
    auto rank = [](KeyChange::Kind k) {
        return std::find(std::begin(report::kKinds), std::end(report::kKinds), k) -
               std::begin(report::kKinds);
    };
    std::stable_sort(out.begin(), out.end(), [&](const KeyChangeGroup &a, const KeyChangeGroup &b) {
        return rank(a.kind) < rank(b.kind);
    });
    return out;
}

std::vector<DiffEntryGroup> foldDiffEntries(const DiffResult &diff,
                                            const std::vector<size_t> &which)
{
    std::vector<FoldInput> items;
    for (size_t i : which) {
        const DiffEntry &e = diff.entries[i];
        const std::string category = std::to_string(int(e.section)) + "/" +
                                     std::to_string(int(e.status)) + "/" +
                                     (e.realLoadFills ? "1" : "0");
        items.push_back({category, e.name, {splitText(e.reason), splitText(e.fix)}});
    }
    std::vector<DiffEntryGroup> out;
    for (report::FoldGroup &f : report::foldItems(items)) {
        DiffEntryGroup g;
        for (size_t m : f.members)
            g.entries.push_back(which[m]);
        g.pattern = std::move(f.pattern);
        g.reason = std::move(f.texts[0]);
        g.fix = std::move(f.texts[1]);
        out.push_back(std::move(g));
    }
    // What a real load does not fill first, then by section; otherwise in model order.
    auto rank = [&](const DiffEntryGroup &g) {
        const DiffEntry &e = diff.entries[g.entries.front()];
        return std::tuple(e.realLoadFills, int(e.section));
    };
    std::stable_sort(out.begin(), out.end(), [&](const DiffEntryGroup &a, const DiffEntryGroup &b) {
        return rank(a) < rank(b);
    });
    return out;
}

std::vector<UnconsumedKeyGroup> foldUnconsumed(const DiffResult &diff)
{
    std::vector<FoldInput> items;
    for (const UnconsumedKey &u : diff.unconsumed)
        items.push_back({u.tensor ? "t" : "o", u.key, {splitText(u.note)}});
    std::vector<UnconsumedKeyGroup> out;
    for (report::FoldGroup &f : report::foldItems(items))
        out.push_back({std::move(f.pattern), std::move(f.members), std::move(f.texts[0])});
    return out;
}

} // namespace shardscope
