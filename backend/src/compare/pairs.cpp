// SPDX-License-Identifier: MIT
// Where each side keeps each tensor of the layout: the load diff's sources, found through every
// rule (the values, not what a particular loader would ask for), or Megatron-Bridge's mapping
// for a Hugging Face side; then every key both sides store under the same name that no pair
// compares, paired as stored, so that a rule switched off never hides a stored tensor.
#include "compare/compare.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

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

using KeySet = std::set<std::string, std::less<>>;

// The stored keys that hold all of an entry's data, when the diff knows them whole: the ones it
// reads, or the ones a rule that is switched off would read. nullopt otherwise (a shape
// mismatch, holes, nothing stored).
std::optional<std::vector<std::string>> dataKeys(const DiffEntry *e)
{
    if (!e)
        return std::nullopt;
    std::vector<std::string> keys;
    if (readable(e->status) && !e->sources.empty()) {
        for (const DiffSource &s : e->sources)
            keys.push_back(s.key);
        return keys;
    }
    if (e->status == LoadStatus::Unloadable && e->sources.empty() && !e->unreadKeys.empty())
        return e->unreadKeys;
    return std::nullopt;
}

// A legacy side's model tensors in rank files the diff neither reads nor lists (another TP
// rank's copy, for which TP rank 0's stands in a load): a value comparison answers for them too.
std::vector<const TensorEntry *> legacyUnlisted(const CheckpointIndex &c, const DiffResult &d)
{
    std::vector<const TensorEntry *> out;
    if (c.format != Format::MegatronLegacy)
        return out;
    KeySet known;
    for (const DiffEntry &e : d.entries) {
        for (const DiffSource &s : e.sources)
            known.insert(s.key);
        known.insert(e.unreadKeys.begin(), e.unreadKeys.end());
    }
    for (const UnconsumedKey &u : d.unconsumed)
        known.insert(u.key);
    for (const TensorEntry &t : c.tensors) {
        const std::string_view key = t.key.view();
        const size_t slash = key.find('/');
        if (slash != std::string_view::npos && key.substr(slash + 1).starts_with("model") &&
            key.find("._extra_state") == std::string_view::npos && !known.count(key))
            out.push_back(&t);
    }
    return out;
}

// The stored tensors of one side that a value comparison answers for: what the diff found of the
// model and its optimizer state (read, held for a switched-off rule, or consumed by none), or
// every tensor of a side read through Megatron-Bridge's mapping. Not TE's _extra_state, not the
// training loop's (rng state, arguments), not optimizer state under --no-optimizer.
KeySet answeredKeys(const CheckpointIndex &c, const DiffResult *d)
{
    KeySet keys;
    auto add = [&](std::string_view key) {
        if (key.find("._extra_state") == std::string_view::npos &&
            !key.starts_with("optimizer.param_to_group_meta."))
            keys.emplace(key);
    };
    if (!d) {
        for (const TensorEntry &t : c.tensors)
            add(t.key.view());
        return keys;
    }
    for (const DiffEntry &e : d->entries) {
        if (e.section == Section::Other)
            continue;
        for (const DiffSource &s : e.sources)
            add(s.key);
        for (const std::string &k : e.unreadKeys)
            add(k);
    }
    for (const UnconsumedKey &u : d->unconsumed)
        if (u.tensor)
            add(u.key);
    for (const TensorEntry *t : legacyUnlisted(c, *d))
        add(t->key.view());
    return keys;
}

std::string shapeText(const std::vector<int64_t> &shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

SideValues storedWhole(const CheckpointIndex &c, const TensorEntry &t)
{
    DiffSource s;
    s.key = std::string(t.key.view());
    s.shape = t.shape.toVector();
    s.dtype = t.dtypeName;
    s.entry = int64_t(&t - c.tensors.data());
    return {{std::move(s)}, t.dtypeName};
}

// Per stored key whose chunks leave holes, why it cannot be compared as it is.
std::map<std::string, std::string, std::less<>> holesIn(const CheckpointIndex &c, const char *side)
{
    std::map<std::string, std::string, std::less<>> out;
    for (const Problem &p : c.problems)
        if (p.effect == Problem::Effect::Holes)
            out.emplace(p.key, std::string(side) + " checkpoint: " + p.message);
    return out;
}

/**
 * Every key both sides store under the same name (the stored key, byte for byte) that no pair
 * compares on both sides: compared as stored when the shapes agree (dtypes may differ: the
 * comparison is in value), not compared with both shapes when they do not (never reshaped).
 * A key only a not-compared pair mentions on both sides and stored with other shapes is left to
 * that pair. Then a layout pair that was not compared and whose whole data, on each side, is in
 * keys now compared as stored is dropped: its values are compared, under their stored names.
 */
void pairStoredNames(const CheckpointIndex &a, const CheckpointIndex &b, const DiffResult *da,
                     const DiffResult *db,
                     const std::vector<std::optional<std::vector<std::string>>> &dataA,
                     const std::vector<std::optional<std::vector<std::string>>> &dataB,
                     std::vector<TensorPair> &pairs)
{
    // Mentioned: what the diff places anywhere; unreadable: what a pair already reports as such.
    KeySet coveredA, coveredB, mentionedA, mentionedB, unreadable;
    for (const TensorPair &p : pairs) {
        if (!p.a || !p.b)
            continue;
        for (const DiffSource &s : p.a->sources)
            coveredA.insert(s.key);
        for (const DiffSource &s : p.b->sources)
            coveredB.insert(s.key);
    }
    auto mentioned = [&unreadable](const DiffResult *d, KeySet &out) {
        if (d)
            for (const DiffEntry &e : d->entries) {
                for (const DiffSource &s : e.sources) {
                    out.insert(s.key);
                    if (e.status == LoadStatus::Unreadable)
                        unreadable.insert(s.key);
                }
                out.insert(e.unreadKeys.begin(), e.unreadKeys.end());
            }
    };
    mentioned(da, mentionedA);
    mentioned(db, mentionedB);
    const KeySet answeredA = answeredKeys(a, da), answeredB = answeredKeys(b, db);
    const auto holesA = holesIn(a, "first"), holesB = holesIn(b, "second");
    std::unordered_map<std::string_view, const TensorEntry *> inB;
    inB.reserve(b.tensors.size());
    for (const TensorEntry &t : b.tensors)
        inB.emplace(t.key.view(), &t);

    const size_t layoutPairs = pairs.size();
    KeySet direct, compared; // keys paired as stored; those of them compared
    for (const TensorEntry &ta : a.tensors) {
        const std::string_view key = ta.key.view();
        const auto it = inB.find(key);
        if (it == inB.end() || !answeredA.count(key) || !answeredB.count(key))
            continue;
        if ((coveredA.count(key) && coveredB.count(key)) || unreadable.count(key))
            continue;
        const TensorEntry &tb = *it->second;
        TensorPair t;
        t.name = std::string(key);
        t.shape = ta.shape.toVector();
        if (t.shape != tb.shape.toVector()) {
            if (mentionedA.count(key) && mentionedB.count(key))
                continue;
            t.why = "stored under the same name as " + shapeText(t.shape) + " " + ta.dtypeName +
                    " in the first checkpoint and " + shapeText(tb.shape.toVector()) + " " +
                    tb.dtypeName + " in the second: not reshaped";
            direct.insert(t.name);
            pairs.push_back(std::move(t));
            continue;
        }
        if (auto ha = holesA.find(key); ha != holesA.end())
            t.why = ha->second;
        else if (auto hb = holesB.find(key); hb != holesB.end())
            t.why = hb->second;
        else {
            t.a = storedWhole(a, ta);
            t.b = storedWhole(b, tb);
            compared.insert(t.name);
        }
        direct.insert(t.name);
        pairs.push_back(std::move(t));
    }
    if (direct.empty())
        return;

    // A layout pair whose data is all compared as stored, and stored keys "only in" a side that
    // are now paired, leave the list.
    auto within = [&compared](const std::optional<std::vector<std::string>> &keys) {
        return keys && !keys->empty() &&
               std::all_of(keys->begin(), keys->end(),
                           [&compared](const std::string &k) { return compared.count(k) > 0; });
    };
    std::vector<TensorPair> kept;
    kept.reserve(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
        TensorPair &p = pairs[i];
        const bool layoutPair = i < layoutPairs;
        if (layoutPair && (!p.a || !p.b) && !p.unreadable && i < dataA.size() && within(dataA[i]) &&
            within(dataB[i]))
            continue;
        if (layoutPair && !p.a && !p.b && !p.unreadable && direct.count(p.name) &&
            p.why.starts_with("only in the "))
            continue;
        kept.push_back(std::move(p));
    }
    pairs = std::move(kept);
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
    const DiffResult *order = da ? &*da : db ? &*db : nullptr; // the model's order
    if (da)
        for (const DiffEntry &e : da->entries)
            inA.emplace(e.name, &e);
    if (db)
        for (const DiffEntry &e : db->entries)
            inB.emplace(e.name, &e);

    std::vector<TensorPair> pairs;
    // Per layout pair, the stored keys that hold all its data on each side (dataKeys()).
    std::vector<std::optional<std::vector<std::string>>> dataA, dataB;
    auto mappedKeys = [](const std::optional<SideValues> &v) {
        std::optional<std::vector<std::string>> keys;
        if (v) {
            keys.emplace();
            for (const DiffSource &s : v->sources)
                keys->push_back(s.key);
        }
        return keys;
    };
    if (!da && !db) { // both Hugging Face: their own names
        for (const LayoutParam &p : layout.params) {
            TensorPair t;
            t.name = p.name;
            t.shape = p.shape;
            std::string whyA, whyB;
            t.a = hfValues(*hfA, a, p.name, p.shape, whyA);
            t.b = hfValues(*hfB, b, p.name, p.shape, whyB);
            t.why = !t.a ? "first " + whyA : !t.b ? "second " + whyB : "";
            dataA.push_back(mappedKeys(t.a));
            dataB.push_back(mappedKeys(t.b));
            pairs.push_back(std::move(t));
        }
    }
    static const std::vector<DiffEntry> none;
    for (const DiffEntry &e : order ? order->entries : none) {
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
            (mapA ? dataA : dataB).push_back(mappedKeys(mapped));
            (mapA ? t.a : t.b) = std::move(mapped);
            (mapA ? whyA : whyB) = why;
        }
        if (!mapA) {
            auto it = inA.find(e.name);
            const DiffEntry *entry = it == inA.end() ? nullptr : it->second;
            dataA.push_back(dataKeys(entry));
            t.a = fromEntry(a, entry, "first", whyA, t.unreadable);
        }
        if (!mapB) {
            auto it = inB.find(e.name);
            const DiffEntry *entry = it == inB.end() ? nullptr : it->second;
            dataB.push_back(dataKeys(entry));
            t.b = fromEntry(b, entry, "second", whyB, t.unreadable);
        }
        if (!t.a)
            t.why = whyA;
        else if (!t.b)
            t.why = whyB;
        pairs.push_back(std::move(t));
    }
    // Stored tensors the layout does not name: listed, not compared (unless both sides store
    // them under the same name: pairStoredNames).
    auto onlyIn = [&](const CheckpointIndex &c, const std::optional<DiffResult> &d,
                      const char *side) {
        if (d) {
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
            for (const TensorEntry *t : legacyUnlisted(c, *d))
                pairs.push_back({std::string(t->key.view()),
                                 {},
                                 t->shape.toVector(),
                                 std::nullopt,
                                 std::nullopt,
                                 std::string("only in the ") + side +
                                     " checkpoint (another rank's copy: the layout reads TP "
                                     "rank 0's file)",
                                 false});
            return;
        }
        // A side read through Megatron-Bridge's mapping: what no pair reads of it.
        KeySet read;
        for (const TensorPair &p : pairs)
            if (const auto &v = &c == &a ? p.a : p.b)
                for (const DiffSource &s : v->sources)
                    read.insert(s.key);
        for (const TensorEntry &t : c.tensors)
            if (!read.count(t.key.view()))
                pairs.push_back({std::string(t.key.view()),
                                 {},
                                 t.shape.toVector(),
                                 std::nullopt,
                                 std::nullopt,
                                 std::string("only in the ") + side +
                                     " checkpoint (no tensor of the layout reads it through "
                                     "Megatron-Bridge's mapping)",
                                 false});
    };
    onlyIn(a, da, "first");
    onlyIn(b, db, "second");
    pairStoredNames(a, b, da ? &*da : nullptr, db ? &*db : nullptr, dataA, dataB, pairs);
    return pairs;
}

} // namespace shardscope::detail
