// SPDX-License-Identifier: MIT
// Where each side keeps each tensor of the layout: the load diff's sources, found through every
// rule (the values, not what a particular loader would ask for), or Megatron-Bridge's mapping
// for a Hugging Face side.
#include "compare/compare.h"

#include <map>

namespace shardscope::detail {

namespace {

bool readable(LoadStatus s)
{
    switch (s) {
    case LoadStatus::Ok:
    case LoadStatus::Split:
    case LoadStatus::Merge:
    case LoadStatus::Rename:
    case LoadStatus::Cast:
        return true;
    default:
        return false;
    }
}

std::optional<SideValues> fromEntry(const CheckpointIndex &c, const DiffEntry *e, const char *side,
                                    std::string &why, bool &unreadable)
{
    if (e && e->status == LoadStatus::Unreadable) {
        unreadable = true;
        const std::string key = e->sources.empty() ? e->name : e->sources.front().key;
        for (const Problem &p : c.problems)
            if (p.key == key && p.effect == Problem::Effect::Unreadable) {
                why = p.toString();
                return std::nullopt;
            }
        why = std::string(side) + " checkpoint: " + e->reason;
        return std::nullopt;
    }
    if (!e) {
        why = std::string(side) + " checkpoint: not found";
        return std::nullopt;
    }
    if (e->status == LoadStatus::ShapeMismatch && !e->sources.empty()) {
        std::string shape;
        for (int64_t d : e->sources.front().shape)
            shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        why = std::string(side) + " checkpoint: stored with shape [" + shape + "]";
        return std::nullopt;
    }
    if (!readable(e->status) || e->sources.empty()) {
        why = std::string(side) + " checkpoint: " + std::string(statusName(e->status)) +
              (e->reason.empty() ? "" : " (" + e->reason + ")");
        return std::nullopt;
    }
    SideValues v;
    v.sources = e->sources;
    v.dtype = e->sources.front().dtype;
    for (const DiffSource &s : e->sources)
        if (s.dtype != v.dtype) {
            why = std::string(side) + " checkpoint: its pieces are stored as " + v.dtype + " and " +
                  s.dtype;
            return std::nullopt;
        }
    return v;
}

} // namespace

Result<std::vector<TensorPair>> pairTensors(const CheckpointIndex &a, const CheckpointIndex &b,
                                            const Layout &layout, const DiffOptions &options,
                                            bool includeOptimizer)
{
    DiffOptions o = options;
    o.everyRule = true;
    o.includeOptimizer = includeOptimizer;
    const auto hfA = hfLlamaOf(a), hfB = hfLlamaOf(b);
    bool megatronLayout = false;
    for (const LayoutParam &p : layout.params)
        megatronLayout = megatronLayout || p.name.starts_with("decoder.layers.");
    const bool mapA = hfA && megatronLayout, mapB = hfB && megatronLayout;
    std::optional<DiffResult> da, db;
    if (!mapA) {
        auto d = diffAgainstLayout(a, layout, o);
        if (!d)
            return d.error();
        da = std::move(*d);
    }
    if (!mapB) {
        auto d = diffAgainstLayout(b, layout, o);
        if (!d)
            return d.error();
        db = std::move(*d);
    }
    std::map<std::string, const DiffEntry *> inA, inB;
    const DiffResult &order = da ? *da : *db; // the entries in the model's order
    if (da)
        for (const DiffEntry &e : da->entries)
            inA.emplace(e.name, &e);
    if (db)
        for (const DiffEntry &e : db->entries)
            inB.emplace(e.name, &e);

    std::vector<TensorPair> pairs;
    if (!da && !db) { // both Hugging Face: their own names
        for (const LayoutParam &p : layout.params) {
            TensorPair t;
            t.name = p.name;
            t.shape = p.shape;
            std::string whyA, whyB;
            t.a = hfValues(*hfA, a, p.name, p.shape, whyA);
            t.b = hfValues(*hfB, b, p.name, p.shape, whyB);
            t.why = !t.a ? "first " + whyA : !t.b ? "second " + whyB : "";
            pairs.push_back(std::move(t));
        }
        return pairs;
    }
    // Stored tensors the layout does not name: listed, not compared.
    auto onlyIn = [&](const std::optional<DiffResult> &d, const char *side) {
        if (d)
            for (const UnconsumedKey &u : d->unconsumed)
                if (u.tensor && !u.key.starts_with("optimizer.param_to_group_meta."))
                    pairs.push_back({u.key,
                                     {},
                                     u.shape,
                                     std::nullopt,
                                     std::nullopt,
                                     std::string("only in the ") + side + " checkpoint" +
                                         (u.note.empty() ? "" : " (" + u.note + ")"),
                                     false});
    };
    for (const DiffEntry &e : order.entries) {
        if (e.section != Section::Model && e.section != Section::Optimizer)
            continue;
        if (e.name.ends_with("._extra_state"))
            continue;
        TensorPair t;
        t.name = e.name;
        t.state = e.state;
        t.shape = e.shape;
        std::string whyA, whyB;
        if (mapA || mapB) {
            const CheckpointIndex &hfSide = mapA ? a : b;
            std::optional<SideValues> mapped;
            std::string why;
            if (!e.state.empty())
                why = "Hugging Face checkpoint: holds no optimizer state";
            else
                mapped = hfValues(mapA ? *hfA : *hfB, hfSide, e.name, e.shape, why);
            (mapA ? t.a : t.b) = std::move(mapped);
            (mapA ? whyA : whyB) = why;
        }
        if (!mapA) {
            auto it = inA.find(e.name);
            t.a = fromEntry(a, it == inA.end() ? nullptr : it->second, "first", whyA, t.unreadable);
        }
        if (!mapB) {
            auto it = inB.find(e.name);
            t.b =
                fromEntry(b, it == inB.end() ? nullptr : it->second, "second", whyB, t.unreadable);
        }
        if (!t.a)
            t.why = whyA;
        else if (!t.b)
            t.why = whyB;
        pairs.push_back(std::move(t));
    }
    onlyIn(da, "first");
    onlyIn(db, "second");
    return pairs;
}

} // namespace shardscope::detail
