// SPDX-License-Identifier: MIT
#include "fix/fixplan.h"

#include "common/flatmap.h"
#include "diff/namedcauses.h"
#include "fix/tensorarchive.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace shardscope::detail {

namespace {

constexpr size_t kExamples = 3;

std::string replaceInName(std::string s, const std::string &from, const std::string &to)
{
    if (const size_t at = s.find(from); at != std::string::npos)
        s.replace(at, from.size(), to);
    return s;
}

// The nesting of a new key, modelled on the key whose data it takes: the same leading
// components where the new key starts with them ("model", "optimizer.state", …).
template<typename Entry>
KeyPath pathLike(const Entry &like, const std::string &key)
{
    std::vector<std::string> parts = like.path.parts(like.key);
    if (parts.size() >= 2) {
        parts.pop_back();
        std::string prefix;
        for (const std::string &p : parts)
            prefix += (prefix.empty() ? "" : ".") + p;
        if (key.size() > prefix.size() && key.starts_with(prefix) && key[prefix.size()] == '.') {
            parts.push_back(key.substr(prefix.size() + 1));
            return KeyPath::fromParts(key, parts);
        }
    }
    return KeyPath::fromParts(key, std::vector<std::string>{key});
}

class Planner
{
public:
    Planner(const CheckpointIndex &source, const DiffResult &asked, const DiffResult &found)
        : m_source(source)
        , m_asked(asked)
    {
        // Views into the diffs and the index, which outlive the planner.
        for (const DiffEntry &e : found.entries)
            m_found[size_t(e.section)].emplace(e.name, &e);
        for (const DiffEntry &e : asked.entries)
            if (e.section == Section::Model)
                m_askedModel.emplace(e.name, &e);
        // The index's own look-ups scan: 650,000 keys at DeepSeek-V3 scale need a table.
        m_tensorAt = FlatStringMap(source.tensors.size());
        m_objectAt = FlatStringMap(source.objects.size());
        for (size_t i = 0; i < source.tensors.size(); ++i)
            m_tensorAt.insert(source.tensors[i].key, uint32_t(i));
        for (size_t i = 0; i < source.objects.size(); ++i)
            m_objectAt.insert(source.objects[i].key, uint32_t(i));
    }

    FixPlan run()
    {
        // Keys the load reads as they are stay, whatever a repaired key also takes from them.
        for (const DiffEntry &e : m_asked.entries)
            if (e.realLoadFills)
                for (const std::string &k : e.requestKeys)
                    m_kept.insert(k);
        for (const DiffEntry &e : m_asked.entries)
            if (!e.realLoadFills)
                repair(e);
        nameOptimizerGroups();
        leaveOutUnused();
        assemble();
        return std::move(m_plan);
    }

private:
    // Stored tensors no parameter uses that the load raises on are left out (unusedTensors()).
    void leaveOutUnused()
    {
        for (auto &[entry, u] : unusedTensors(m_source, m_asked)) {
            if (m_consumed.count(m_source.tensors[entry].key))
                continue; // a repaired key's data
            if (!u.kept) {
                m_consumed.insert(m_source.tensors[entry].key);
                m_unused.insert(m_source.tensors[entry].key);
            }
            m_plan.unused.push_back(std::move(u));
        }
    }

    void block(const DiffEntry &e, const std::string &why)
    {
        m_plan.blockers.push_back(e.name + ": " + why);
        m_pendingRewrites.clear();
    }

    void count(const std::string &kind, const std::string &example)
    {
        auto &counts = m_plan.changes;
        auto it = std::find_if(counts.begin(), counts.end(),
                               [&](const FixChangeCount &c) { return c.kind == kind; });
        if (it == counts.end())
            it = counts.insert(counts.end(), FixChangeCount{kind, 0, {}});
        ++it->count;
        if (it->examples.size() < kExamples)
            it->examples.push_back(example);
    }

    const TensorEntry *tensorOf(const DiffSource &s) const
    {
        if (s.entry >= 0 && size_t(s.entry) < m_source.tensors.size() &&
            m_source.tensors[size_t(s.entry)].key == s.key)
            return &m_source.tensors[size_t(s.entry)];
        const uint32_t at = m_tensorAt.find(s.key);
        return at == FlatStringMap::kAbsent || m_source.tensors[at].key != s.key
                   ? nullptr
                   : &m_source.tensors[at];
    }

    bool isStored(const std::string &key) const
    {
        const uint32_t t = m_tensorAt.find(key), o = m_objectAt.find(key);
        return (t != FlatStringMap::kAbsent && m_source.tensors[t].key == key) ||
               (o != FlatStringMap::kAbsent && m_source.objects[o].key == key);
    }

    // Megatron's handlers rename optimizer.state to the stored names but leave
    // param_to_group_meta under the live ones: a parameter stored under other names has no group
    // entry. Its hyperparameters are the stored parameter's whose data it takes (the first
    // section's), referenced under the live name.
    void repairGroup(const DiffEntry &e)
    {
        static const std::string kGroup = "optimizer.param_to_group_meta.module.module.module.";
        auto fm = m_found[size_t(Section::Model)].find(e.param);
        const DiffEntry *model = fm == m_found[size_t(Section::Model)].end() ? nullptr : fm->second;
        auto am = m_askedModel.find(e.param);
        if (!model || model->sources.empty() || am == m_askedModel.end() ||
            am->second->requestKeys.empty()) {
            block(e, e.reason.empty() ? "no stored parameter to take its optimizer group from"
                                      : e.reason);
            return;
        }
        // The wrapper ("model.module.") is what precedes the name's first component in the
        // key the load asks for (the rest may be spelled as stored: MTP's transformer_layer).
        const std::string &asked = am->second->requestKeys.front();
        const std::string head = e.param.substr(0, e.param.find('.') + 1);
        size_t at = 0;
        while ((at = asked.find(head, at)) != std::string::npos && at > 0 && asked[at - 1] != '.')
            ++at;
        const std::string &stored = model->sources.front().key;
        if (at == std::string::npos || !stored.starts_with(asked.substr(0, at))) {
            block(e, "its data's key " + stored + " is not under the model's wrapper");
            return;
        }
        const std::string storedName = stored.substr(at);
        std::string from = kGroup + storedName + ".";
        const std::string to = kGroup + e.param + ".";
        // Stored under the stored parameter's name, or under its live MTP spelling.
        const auto hasGroup = [&](const std::string &prefix) {
            const auto &keys = objectKeys();
            auto it = std::lower_bound(keys.begin(), keys.end(),
                                       std::pair(std::string_view(prefix), size_t(0)));
            return it != keys.end() && it->first.starts_with(prefix);
        };
        if (!hasGroup(from)) {
            // Under the stored parameter's live MTP spelling, or under the parameter's own name
            // with the prefix the stored groups lack or carry (key_prefix: a model that keeps
            // the saved one under language_model.).
            std::vector<std::string> names = {
                replaceInName(storedName, ".transformer_layer.", ".mtp_model_layer.")};
            if (const std::optional<KeyPrefix> &kp = groupPrefix(kGroup))
                names.push_back(kp->storedName(e.param));
            for (const std::string &n : names)
                if (hasGroup(kGroup + n + ".")) {
                    from = kGroup + n + ".";
                    break;
                }
        }
        size_t made = 0;
        const auto &keys = objectKeys();
        for (auto it = std::lower_bound(keys.begin(), keys.end(),
                                        std::pair(std::string_view(from), size_t(0)));
             it != keys.end() && it->first.starts_with(from); ++it) {
            const ObjectEntry &o = m_source.objects[it->second];
            if (!o.key.starts_with(from) || !o.location)
                continue;
            ObjectEntry copy;
            std::string key = std::string(to).append(o.key.substr(from.size()));
            if (isStored(key) || m_madeObjects.count(key))
                continue;
            copy.key = key;
            copy.path = pathLike(o, key);
            copy.location = o.location;
            m_madeObjects.insert(key);
            m_newObjects.push_back(std::move(copy));
            ++made;
        }
        if (made == 0) {
            block(e, "no optimizer group entries under " + from);
            return;
        }
        count("group", to + "* <- " + from + "*");
    }

    // Optimizer state saved by position and repaired under the parameters' names (rule
    // optimizer_index): set_optimizer_state_dict matches each param group to its parameters by
    // the names in the group's `params`, and with positions there it drops every group's lr,
    // betas and weight decay without a word. One group holds every position in order: its list
    // is written anew with the names; several groups' lists would have to be read to split the
    // names among them.
    void nameOptimizerGroups()
    {
        std::map<int64_t, std::string> byPosition;
        const auto &found = m_found[size_t(Section::Optimizer)];
        for (const DiffEntry &e : m_asked.entries) {
            if (e.realLoadFills || e.section != Section::Optimizer)
                continue;
            const auto it = found.find(e.name);
            if (it == found.end() || it->second->sources.size() != 1 ||
                std::find(it->second->rules.begin(), it->second->rules.end(), "optimizer_index") ==
                    it->second->rules.end())
                continue;
            const std::string &key = it->second->sources.front().key; // optimizer.state.<i>.…
            const size_t dot = key.find('.', 16);
            if (!key.starts_with("optimizer.state.") || dot == std::string::npos)
                continue;
            byPosition.emplace(std::stoll(key.substr(16, dot - 16)), e.param);
        }
        if (byPosition.empty())
            return;
        std::vector<size_t> groups;
        for (size_t i = 0; i < m_source.objects.size(); ++i)
            if (m_source.objects[i].key.starts_with("optimizer.param_groups.") &&
                m_source.objects[i].key.ends_with(".params") && m_source.objects[i].location)
                groups.push_back(i);
        if (groups.size() != 1 || int64_t(byPosition.size()) != byPosition.rbegin()->first + 1) {
            m_plan.blockers.push_back(
                "optimizer.param_groups: " + std::to_string(groups.size()) +
                " param groups keep their parameters by position; the load matches each group "
                "to its parameters by name, and which positions each group holds is in its "
                "params list, which a repair by references does not read: rename the groups' "
                "params by hand (or save with get_optimizer_state_dict)");
            return;
        }
        std::vector<std::string> names;
        for (const auto &[position, name] : byPosition)
            names.push_back(name);
        const ObjectEntry &o = m_source.objects[groups.front()];
        ObjectEntry copy;
        copy.key = o.key;
        copy.path = o.path;
        copy.location = Location{}; // placed in the new data file (placeRewrites)
        m_consumedObjects.insert(o.key);
        m_newObjects.push_back(std::move(copy));
        m_plan.objectWrites.push_back({m_newObjects.size() - 1, stringListArchive(names)});
        count("group", o.key.str() + " <- the parameters' names, in position order");
    }

    void repair(const DiffEntry &e)
    {
        if (e.section == Section::Other) {
            repairGroup(e);
            return;
        }
        if (e.wrongSource) {
            block(e, e.reason.empty() ? "the load fills it from another key" : e.reason);
            return;
        }
        auto &found = m_found[size_t(e.section)];
        auto it = found.find(e.name);
        const DiffEntry *f = it == found.end() ? nullptr : it->second;
        const auto located = [](const DiffEntry *x) {
            return x && !x->sources.empty() && !x->wrongSource &&
                   (x->status == LoadStatus::Ok || x->status == LoadStatus::Split ||
                    x->status == LoadStatus::Merge || x->status == LoadStatus::Rename ||
                    x->status == LoadStatus::Cast);
        };
        // Every rule on changes the request too (a fused key asked for as its sections), and
        // two rules are not combined: a fused key stored whole under a wrapper's prefix is
        // found by the asked diff alone. Where it located the data, its sources serve.
        if (!located(f) && located(&e))
            f = &e;
        if (!located(f)) {
            block(e, "its data is not in the checkpoint under any rule (" +
                         std::string(statusName(f ? f->status : e.status)) + ")" +
                         (e.reason.empty() ? std::string() : ": " + e.reason));
            return;
        }
        if (f->sources.size() == 1 && f->sources.front().dtype == "object") {
            repairObject(e, f->sources.front());
            return;
        }
        // One key per request: the whole parameter, or each section the load asks for apart
        // (rows [begin, end) along `dim`).
        std::vector<DiffSource> targets = e.requestRows;
        if (targets.empty()) {
            if (e.requestKeys.size() != 1) {
                block(e, "the load asks for " + std::to_string(e.requestKeys.size()) +
                             " keys for it without saying which rows each holds");
                return;
            }
            targets.push_back({e.requestKeys.front(), f->shape, {}, 0, 0, 0, 0, {}, -1});
        }
        for (const DiffSource &target : targets)
            if (isStored(target.key)) {
                block(e, "the checkpoint already holds " + target.key +
                             " with other contents; a repair never replaces a stored key");
                return;
            }
        if (std::any_of(targets.begin(), targets.end(),
                        [](const DiffSource &t) { return !t.index.empty(); })) {
            repairStacked(e, *f, targets);
            return;
        }
        std::vector<TensorEntry> made;
        std::vector<std::string> origins;
        std::vector<std::string> examples, kinds;
        std::vector<std::string_view> consumed;
        uint64_t bytes = 0;
        for (const DiffSource &target : targets) {
            if (m_made.count(target.key))
                continue; // another entry made it (the same parameter's other state, or section)
            TensorEntry t;
            t.key = target.key;
            t.shape = f->shape;
            const bool window = target.begin < target.end && !t.shape.empty();
            const size_t dim = size_t(target.dim);
            if (window)
                t.shape.edit()[dim] = target.end - target.begin;
            const int64_t wb = window ? target.begin : 0;
            const int64_t we = window ? target.end : t.shape.empty() ? 1 : t.shape[dim];
            // A 0-dim state (Adam's step) of a fused parameter is one value its sections share:
            // the split handler copies it to each; the first section's is taken.
            const size_t sources =
                t.shape.empty() ? std::min<size_t>(1, f->sources.size()) : f->sources.size();
            const TensorEntry *like = nullptr;
            const uint64_t bytesBefore = bytes;
            std::string from, rewriteWhy;
            size_t parts = 0;
            bool stacked = false, cut = false;
            // What a rewrite would copy; made into pieces (copies of the stored entries) only
            // when one is needed.
            std::vector<std::tuple<const TensorEntry *, const DiffSource *, Rows>> sourced;
            if (sources < f->sources.size())
                for (const DiffSource &src : f->sources)
                    consumed.push_back(src.key);
            for (size_t si = 0; si < sources; ++si) {
                const DiffSource &src = f->sources[si];
                const TensorEntry *st = tensorOf(src);
                if (!st) {
                    block(e, src.key + " is not a stored tensor");
                    return;
                }
                const std::optional<Rows> rows = rowsOf(src, dim, wb, we, f->shape);
                if (!rows)
                    continue; // this source holds other rows
                Reference ref = addChunks(t, *st, src, dim, *rows, bytes);
                if (!ref.why.empty() && !ref.rewrite) {
                    block(e, ref.why);
                    return;
                }
                if (rewriteWhy.empty())
                    rewriteWhy = ref.why;
                sourced.emplace_back(st, &src, *rows);
                if (!like) {
                    like = st;
                    t.dtype = st->dtype;
                    t.dtypeName = st->dtypeName;
                } else if (st->dtypeName != t.dtypeName && rewriteWhy.empty()) {
                    rewriteWhy = "its sections are stored as " + t.dtypeName + " and " +
                                 st->dtypeName + ": one key holds one dtype (a cast)";
                }
                ++parts;
                stacked = stacked || !src.index.empty();
                // Rows cut out of a bigger stored tensor (a key stored fused).
                cut =
                    cut || (!t.shape.empty() && st->shape[src.index.size() + dim] != t.shape[dim]);
                from += (from.empty() ? "" : " + ") + src.key;
                consumed.push_back(src.key);
            }
            if (!like) {
                block(e, "no stored tensor holds the rows of " + target.key);
                return;
            }
            if (!rewriteWhy.empty()) {
                // Copied, not referenced: one chunk, the whole key, in the key's dtype (the
                // layout's when the sections disagree: what the load's copy_ casts to anyway).
                std::vector<RewritePiece> pieces;
                for (const auto &[st, src, rows] : sourced)
                    pieces.push_back(piece(*st, *src, dim, rows));
                if (std::string why = rewriteInto(t, e, dim, std::move(pieces)); !why.empty()) {
                    block(e, rewriteWhy + "; " + why);
                    return;
                }
                bytes = bytesBefore;
            }
            // The chunks must cover the key exactly once (they cannot overlap: each came from a
            // disjoint range of a stored tensor that torch checked when it saved).
            unsigned __int128 covered = 0;
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                unsigned __int128 v = 1;
                for (int64_t d : t.chunkSizes(c))
                    v *= uint64_t(d);
                covered += v;
            }
            if (covered != static_cast<unsigned __int128>(t.numel())) {
                block(e, "the stored chunks cover " + std::to_string(uint64_t(covered)) + " of " +
                             std::to_string(t.numel()) + " elements of " + target.key);
                return;
            }
            t.path = pathLike(*like, t.key.str());
            if (!rewriteWhy.empty()) {
                m_pendingRewrites.push_back({made.size(), dim, 0, std::move(m_rewritePieces)});
                kinds.push_back("rewrite");
                examples.push_back(t.key + " <- " + from + " (" + rewriteWhy + ")");
            } else {
                kinds.push_back(parts > 1 ? "concatenate"
                                : cut     ? "split"
                                : stacked ? "select"
                                          : "rename");
                examples.push_back(t.key + " <- " + from);
            }
            // A key referencing one whole stored tensor is that tensor under a new name.
            origins.push_back(rewriteWhy.empty() && parts == 1 && !cut && !stacked
                                  ? std::get<0>(sourced.front())->key.str()
                                  : std::string());
            made.push_back(std::move(t));
        }
        m_plan.bytesReferenced += bytes;
        m_consumed.insert(consumed.begin(), consumed.end());
        for (Rewrite &r : m_pendingRewrites) {
            r.tensor += m_new.size();
            m_plan.bytesRewritten += uint64_t(made[r.tensor - m_new.size()].numel()) *
                                     uint64_t(elementSize(made[r.tensor - m_new.size()].dtype));
            m_plan.rewrites.push_back(std::move(r));
        }
        m_pendingRewrites.clear();
        for (size_t i = 0; i < made.size(); ++i) {
            count(kinds[i], examples[i]);
            m_made.insert(made[i].key.str());
            m_new.push_back(std::move(made[i]));
            m_origins.push_back(std::move(origins[i]));
        }
    }

    // torch_dist asks for a stacked key (a layer axis, an expert axis) that several parameters
    // fill, each its entry: each parameter's part is gathered here, and the key is made once
    // all are (assemble()), copied into the new data file (an item keeps its own axes, which
    // DCP's reader checks, so no stored item can stand for an entry of another key).
    void repairStacked(const DiffEntry &e, const DiffEntry &f,
                       const std::vector<DiffSource> &targets)
    {
        std::vector<std::pair<std::string, RewritePiece>> pieces;
        std::vector<std::string_view> consumed;
        for (const DiffSource &target : targets) {
            const size_t lead = target.index.size();
            if (target.shape.size() < lead) {
                block(e, "the load's request for " + target.key + " has no shape");
                return;
            }
            const std::vector<int64_t> part(target.shape.begin() + std::ptrdiff_t(lead),
                                            target.shape.end());
            const size_t dim = size_t(target.dim);
            const bool window = target.begin < target.end && !part.empty();
            const int64_t wb = window ? target.begin : 0;
            const int64_t we = window ? target.end : part.empty() ? 1 : f.shape[dim];
            const size_t sources =
                part.empty() ? std::min<size_t>(1, f.sources.size()) : f.sources.size();
            size_t given = 0;
            for (size_t si = 0; si < sources; ++si) {
                const DiffSource &src = f.sources[si];
                const TensorEntry *st = tensorOf(src);
                if (!st) {
                    block(e, src.key + " is not a stored tensor");
                    return;
                }
                const std::optional<Rows> rows = rowsOf(src, dim, wb, we, f.shape);
                if (!rows)
                    continue;
                RewritePiece p = piece(*st, src, dim, *rows);
                p.lead = target.index;
                pieces.emplace_back(target.key, std::move(p));
                consumed.push_back(src.key);
                ++given;
            }
            if (given == 0) {
                block(e, "no stored tensor holds the rows of " + target.key);
                return;
            }
            auto [it, fresh] = m_stacked.try_emplace(target.key);
            StackedKey &k = it->second;
            if (fresh) {
                k.lead = lead;
                k.dim = dim;
                k.t.key = target.key;
                k.t.shape = target.shape;
                const TensorEntry &like = pieces.back().second.stored;
                k.t.dtype = like.dtype;
                k.t.dtypeName = like.dtypeName;
                k.t.path = pathLike(like, target.key);
                k.asked = e.dtype;
            } else if (k.t.shape.toVector() != target.shape || k.lead != lead || k.dim != dim) {
                block(e, "its parameters ask for " + target.key + " with different shapes");
                return;
            }
        }
        for (auto &[key, p] : pieces) {
            StackedKey &k = m_stacked[key];
            if (k.from.empty())
                k.from = p.stored.key.str();
            k.pieces.push_back(std::move(p));
        }
        // Dropped only once the keys they fill are made.
        for (const DiffSource &target : targets)
            m_stacked[target.key].consumed.insert(m_stacked[target.key].consumed.end(),
                                                  consumed.begin(), consumed.end());
    }

    // The stacked keys gathered by repairStacked(), each checked to be filled exactly once and
    // made one rewritten key.
    void makeStacked()
    {
        for (auto &[key, k] : m_stacked) {
            const std::vector<int64_t> shape = k.t.shape.toVector();
            const std::vector<int64_t> part(shape.begin() + std::ptrdiff_t(k.lead), shape.end());
            const int64_t rows = part.empty() ? 1 : part[k.dim];
            int64_t entries = 1;
            for (size_t d = 0; d < k.lead; ++d)
                entries *= shape[d];
            // Each entry of the stacked axes, its rows in order, every row once.
            std::vector<std::tuple<std::vector<int64_t>, int64_t, int64_t>> filled;
            for (const RewritePiece &p : k.pieces) {
                const size_t pnd = p.box.sizes.size();
                const int64_t n = part.empty() ? 1 : p.box.sizes[pnd - part.size() + k.dim];
                filled.emplace_back(p.lead, p.at, p.at + n);
            }
            std::sort(filled.begin(), filled.end());
            std::string gap;
            int64_t complete = 0;
            for (size_t i = 0; i < filled.size() && gap.empty();) {
                int64_t next = 0;
                size_t j = i;
                for (; j < filled.size() && std::get<0>(filled[j]) == std::get<0>(filled[i]); ++j) {
                    if (std::get<1>(filled[j]) != next)
                        gap = "the stored tensors leave or overlap row " + std::to_string(next);
                    next = std::get<2>(filled[j]);
                }
                if (gap.empty() && next != rows)
                    gap = "the stored tensors fill " + std::to_string(next) + " of " +
                          std::to_string(rows) + " rows of an entry";
                ++complete;
                i = j;
            }
            if (gap.empty() && complete != entries)
                gap = "the model's parameters fill " + std::to_string(complete) + " of its " +
                      std::to_string(entries) + " entries";
            if (!gap.empty()) {
                m_plan.blockers.push_back(key + ": " + gap);
                continue;
            }
            for (const RewritePiece &p : k.pieces)
                if (p.stored.dtypeName != k.t.dtypeName) {
                    const auto asked = dtypeFromName(k.asked);
                    if (!asked || elementSize(*asked) == 0) {
                        m_plan.blockers.push_back(key + ": its parts are stored in other dtypes "
                                                        "and the model's is not one to cast to");
                        k.pieces.clear();
                        break;
                    }
                    k.t.dtype = *asked;
                    k.t.dtypeName = k.asked;
                    break;
                }
            if (k.pieces.empty())
                continue;
            k.t.strides.clear();
            k.t.storageOffset = 0;
            k.t.chunks.assign(1, Location{});
            k.t.chunkDims.assign(k.t.ndim(), 0);
            k.t.chunkDims.insert(k.t.chunkDims.end(), shape.begin(), shape.end());
            m_plan.bytesRewritten += uint64_t(k.t.numel()) * uint64_t(elementSize(k.t.dtype));
            count("rewrite", key + " <- " + k.from + " (an entry of a stacked key)");
            m_plan.rewrites.push_back({m_new.size(), k.dim, k.lead, std::move(k.pieces)});
            m_made.insert(key);
            m_new.push_back(std::move(k.t));
            m_consumed.insert(k.consumed.begin(), k.consumed.end());
        }
        m_stacked.clear();
    }

    // An entry stored as an object (a TE module's extra state: torch_dist's ShardedObject, one
    // per layer even when the layers are stacked) is renamed: the same bytes under the key the
    // load asks for.
    void repairObject(const DiffEntry &e, const DiffSource &src)
    {
        const uint32_t at = m_objectAt.find(src.key);
        if (e.requestKeys.size() != 1 || at == FlatStringMap::kAbsent ||
            m_source.objects[at].key != src.key || !m_source.objects[at].location) {
            block(e, src.key + " is not a stored object");
            return;
        }
        const std::string &key = e.requestKeys.front();
        if (isStored(key)) {
            block(e, "the checkpoint already holds " + key +
                         " with other contents; a repair never replaces a stored key");
            return;
        }
        if (!m_madeObjects.insert(key).second)
            return;
        const ObjectEntry &o = m_source.objects[at];
        ObjectEntry copy;
        copy.key = key;
        copy.path = pathLike(o, key);
        copy.location = o.location;
        m_newObjects.push_back(std::move(copy));
        m_consumedObjects.insert(src.key);
        count("rename", key + " <- " + src.key);
    }

    // The parameter's rows [lo, hi) a source gives within the window [wb, we) along `dim`, and
    // where they start in the stored tensor; none when it gives none of them.
    struct Rows
    {
        int64_t lo = 0, hi = 0; ///< the parameter's rows
        int64_t stored = 0;     ///< where they start in the stored tensor
        int64_t at = 0;         ///< where they start in the key
    };
    static std::optional<Rows> rowsOf(const DiffSource &s, size_t dim, int64_t wb, int64_t we,
                                      const std::vector<int64_t> &param)
    {
        const size_t nd = param.size();
        const int64_t sb = s.begin < s.end ? s.begin : 0;
        const int64_t se = s.begin < s.end ? s.end : nd == 0 ? 1 : param[dim];
        const int64_t lo = std::max(wb, sb), hi = std::min(we, se);
        // A window of no rows (a zero-element tensor) is held by a source whose rows start
        // there; any other window by the sources it overlaps.
        if (lo > hi || (lo == hi && (wb != we || sb != se || sb != wb)))
            return std::nullopt;
        return Rows{lo, hi, s.storedRow + (lo - sb), lo - wb};
    }

    // The box of the stored tensor behind `s` that holds `rows` (its stacked entry, the rows
    // along `dim`, everything else whole), and where it goes in the key.
    static RewritePiece piece(const TensorEntry &st, const DiffSource &s, size_t dim,
                              const Rows &rows)
    {
        RewritePiece p;
        const size_t lead = s.index.size();
        p.box.offsets.assign(st.ndim(), 0);
        p.box.sizes = st.shape.toVector();
        for (size_t k = 0; k < lead && k < st.ndim(); ++k) {
            p.box.offsets[k] = s.index[k];
            p.box.sizes[k] = 1;
        }
        if (lead + dim < st.ndim()) {
            p.box.offsets[lead + dim] = rows.stored;
            p.box.sizes[lead + dim] = rows.hi - rows.lo;
        }
        p.at = rows.at;
        // Only the chunks the box meets: a stacked key has a chunk per entry, and a piece per
        // entry would otherwise copy them all.
        p.stored.key = st.key;
        p.stored.path = st.path;
        p.stored.dtype = st.dtype;
        p.stored.dtypeName = st.dtypeName;
        p.stored.shape = st.shape;
        p.stored.strides = st.strides;
        p.stored.storageOffset = st.storageOffset;
        std::vector<Location> chunks;
        std::vector<int64_t> dims;
        for (size_t c = 0; c < st.chunks.size(); ++c) {
            const auto off = st.chunkOffsets(c), sz = st.chunkSizes(c);
            bool meets = true;
            for (size_t d = 0; d < st.ndim() && meets; ++d)
                meets =
                    off[d] < p.box.offsets[d] + p.box.sizes[d] && p.box.offsets[d] < off[d] + sz[d];
            if (!meets && st.ndim() > 0)
                continue;
            chunks.push_back(st.chunks[c]);
            dims.insert(dims.end(), off.begin(), off.end());
            dims.insert(dims.end(), sz.begin(), sz.end());
        }
        p.stored.chunks.assign(chunks.begin(), chunks.end());
        p.stored.chunkDims.assign(dims.begin(), dims.end());
        return p;
    }

    // Makes `t` one chunk of new data, copied from `pieces`: empty, or why it cannot.
    std::string rewriteInto(TensorEntry &t, const DiffEntry &e, size_t dim,
                            std::vector<RewritePiece> pieces)
    {
        // The pieces must fill the key's rows exactly once: what they leave would be zeros.
        if (!t.shape.empty()) {
            std::vector<std::pair<int64_t, int64_t>> rows;
            for (const RewritePiece &p : pieces) {
                const size_t lead = p.box.sizes.size() - t.ndim();
                rows.emplace_back(p.at, p.at + p.box.sizes[lead + dim]);
            }
            std::sort(rows.begin(), rows.end());
            int64_t next = 0;
            for (const auto &[lo, hi] : rows) {
                if (lo != next)
                    return "the stored tensors " + std::string(lo < next ? "overlap at" : "leave") +
                           " row " + std::to_string(std::min(lo, next)) + " of " + t.key;
                next = hi;
            }
            if (next != t.shape[dim])
                return "the stored tensors fill " + std::to_string(next) + " of " +
                       std::to_string(t.shape[dim]) + " rows of " + t.key;
        } else if (pieces.empty()) {
            return "no stored tensor holds " + t.key;
        }
        for (const RewritePiece &p : pieces)
            if (p.stored.dtypeName != t.dtypeName) {
                const auto asked = dtypeFromName(e.dtype);
                if (!asked || elementSize(*asked) == 0)
                    return "the model's dtype '" + e.dtype + "' is not one to cast to";
                t.dtype = *asked;
                t.dtypeName = e.dtype;
                break;
            }
        t.strides.clear();
        t.storageOffset = 0;
        t.chunks.assign(1, Location{});
        t.chunkDims.assign(t.ndim(), 0);
        t.chunkDims.insert(t.chunkDims.end(), t.shape.begin(), t.shape.end());
        m_rewritePieces = std::move(pieces);
        return {};
    }

    struct Reference
    {
        std::string why;      ///< empty: referenced
        bool rewrite = false; ///< the data can be copied instead
    };

    // Appends the chunks of `st` (the stored tensor behind `s`) that hold the parameter's rows,
    // placed where they go in `t`; or why they cannot be referenced as whole chunks.
    Reference addChunks(TensorEntry &t, const TensorEntry &st, const DiffSource &s, size_t dim,
                        const Rows &rows, uint64_t &bytes)
    {
        const size_t lead = s.index.size(), nd = t.ndim();
        if (st.ndim() != lead + nd)
            return {s.key + " has " + std::to_string(st.ndim()) + " dimensions where " +
                    std::to_string(lead + nd) + " were expected"};
        if (nd > 0 && (dim >= nd || (s.begin < s.end && size_t(s.dim) != dim)))
            return {s.key + ": its rows run along another dimension than the key's"};
        for (size_t d = 0; d < nd; ++d)
            if (d != dim && st.shape[lead + d] != t.shape[d])
                return {s.key +
                        " is stored with a shape that differs from the parameter's beyond "
                        "dimension " +
                        std::to_string(dim) + " (a reshape)"};
        const int64_t storedLo = rows.stored, storedHi = rows.stored + (rows.hi - rows.lo);
        for (size_t c = 0; c < st.chunks.size(); ++c) {
            const auto off = st.chunkOffsets(c), sz = st.chunkSizes(c);
            bool here = true;
            for (size_t k = 0; k < lead; ++k) {
                if (off[k] > s.index[k] || off[k] + sz[k] <= s.index[k]) {
                    here = false;
                    break;
                }
                if (sz[k] != 1)
                    return {"a stored chunk spans several entries of its stacked axis", true};
            }
            if (!here)
                continue;
            // DCP's reader checks that an item holds the shape the metadata gives it: an entry
            // of a stacked item keeps the stacked axes, so it cannot stand as a key of its own.
            if (lead > 0 && st.chunks[c].encoding == Encoding::TorchSaveArchive)
                return {"a stored item keeps the stacked axis, and DCP's reader checks an "
                        "item's shape",
                        true};
            // A raw storage (torch.save, safetensors) is one tensor's view of its bytes: only
            // the whole of it keeps its strides; any other piece is copied.
            if (st.chunks[c].encoding == Encoding::RawStorage) {
                if (lead > 0 || t.shape != st.shape || !t.chunks.empty())
                    return {"a piece of a stored tensor is copied into the new file", true};
                t.strides = st.strides;
                t.storageOffset = st.storageOffset;
            }
            const int64_t a = nd > 0 ? off[lead + dim] : 0, b = nd > 0 ? a + sz[lead + dim] : 1;
            // No rows (a zero-element key): the stored chunk of no rows where they start.
            if (storedLo == storedHi ? a != storedLo || b != a : b <= storedLo || a >= storedHi)
                continue;
            if (a < storedLo || b > storedHi)
                return {"a stored chunk of " + s.key + " holds rows [" + std::to_string(a) + ", " +
                            std::to_string(b) + ") across the section boundary at " +
                            std::to_string(a < storedLo ? storedLo : storedHi),
                        true};
            for (size_t d = 0; d < nd; ++d)
                t.chunkDims.push_back(d == dim ? a - storedLo + rows.at : off[lead + d]);
            for (size_t d = 0; d < nd; ++d)
                t.chunkDims.push_back(sz[lead + d]);
            t.chunks.push_back(st.chunks[c]);
            bytes += st.chunks[c].length;
        }
        return {};
    }

    void assemble()
    {
        makeStacked();
        // From the few keys consumed, not over the whole index; in the index's order.
        for (std::string_view key : m_consumed) {
            const uint32_t i = m_tensorAt.find(key);
            if (i != FlatStringMap::kAbsent && m_source.tensors[i].key == key &&
                !m_kept.count(key) && !m_made.count(std::string(key)))
                m_plan.dropped.push_back(i);
        }
        std::sort(m_plan.dropped.begin(), m_plan.dropped.end());
        for (size_t i : m_plan.dropped)
            count(m_unused.count(m_source.tensors[i].key) ? "leave out" : "drop",
                  m_source.tensors[i].key.str());
        for (std::string_view key : m_consumedObjects)
            if (const uint32_t i = m_objectAt.find(key);
                i != FlatStringMap::kAbsent && m_source.objects[i].key == key && !m_kept.count(key))
                m_plan.droppedObjects.push_back(i);
        std::sort(m_plan.droppedObjects.begin(), m_plan.droppedObjects.end());
        for (size_t i : m_plan.droppedObjects)
            count("drop", m_source.objects[i].key.str());
        m_plan.tensors = std::move(m_new);
        m_plan.origins = std::move(m_origins);
        m_plan.objects = std::move(m_newObjects);
    }

    // The prefix the stored optimizer groups' names lack or carry against the model's (found
    // once, as the diff finds key_prefix for the parameters).
    const std::optional<KeyPrefix> &groupPrefix(const std::string &group)
    {
        if (!m_groupPrefixFound) {
            m_groupPrefixFound = true;
            std::unordered_set<std::string_view> seen;
            std::vector<std::string_view> stored, wanted;
            for (const auto &[key, i] : objectKeys())
                if (key.starts_with(group))
                    if (const size_t dot = key.rfind('.');
                        dot > group.size() && dot != std::string_view::npos)
                        if (seen.insert(key.substr(group.size(), dot - group.size())).second)
                            stored.push_back(key.substr(group.size(), dot - group.size()));
            for (const DiffEntry &e : m_asked.entries)
                if (e.section == Section::Model)
                    wanted.push_back(e.param);
            m_groupPrefix = commonKeyPrefix(stored, wanted);
        }
        return m_groupPrefix;
    }

    const CheckpointIndex &m_source;
    const DiffResult &m_asked;
    std::optional<KeyPrefix> m_groupPrefix;
    bool m_groupPrefixFound = false;
    // The object keys, sorted, with their indices: param_to_group_meta prefix ranges (made on
    // first use: only a group repair needs them).
    const std::vector<std::pair<std::string_view, size_t>> &objectKeys()
    {
        if (m_objectKeys.empty() && !m_source.objects.empty()) {
            m_objectKeys.reserve(m_source.objects.size());
            for (size_t i = 0; i < m_source.objects.size(); ++i)
                m_objectKeys.emplace_back(m_source.objects[i].key, i);
            std::sort(m_objectKeys.begin(), m_objectKeys.end());
        }
        return m_objectKeys;
    }

    std::unordered_map<std::string_view, const DiffEntry *> m_found[3]; ///< by Section
    std::unordered_map<std::string_view, const DiffEntry *> m_askedModel;
    std::unordered_set<std::string_view> m_kept, m_consumed, m_consumedObjects, m_unused;
    std::unordered_set<std::string> m_made, m_madeObjects; ///< keys of entries still moving
    std::vector<ObjectEntry> m_newObjects;
    std::vector<std::pair<std::string_view, size_t>> m_objectKeys;
    FlatStringMap m_tensorAt{1 << 16}, m_objectAt{1 << 16};
    std::vector<TensorEntry> m_new;
    std::vector<std::string> m_origins;
    std::vector<RewritePiece> m_rewritePieces; ///< the target being rewritten
    struct StackedKey
    {
        TensorEntry t;
        size_t lead = 0, dim = 0;
        std::string asked; ///< the model's dtype, should the parts' differ
        std::string from;  ///< a stored key it takes from, for the summary
        std::vector<RewritePiece> pieces;
        std::vector<std::string_view> consumed; ///< the stored keys it takes from
    };
    std::map<std::string, StackedKey> m_stacked; ///< by key, in order
    std::vector<Rewrite> m_pendingRewrites;      ///< the entry's, indexed into its `made`
    FixPlan m_plan;
};

} // namespace

std::vector<std::pair<size_t, FixUnused>> unusedTensors(const CheckpointIndex &source,
                                                        const DiffResult &asked)
{
    // load_state_dict (a state dict, Megatron's legacy rank files) raises on them as unexpected
    // keys, or returns them (strict=False), and megatron-core's load names them under the
    // strictness modes that check every key: left out of the copy. dcp.load reads only what it
    // asks for, and so does megatron-core's otherwise: kept.
    const Format f = source.format;
    const bool stateDict = f == Format::TorchSave || f == Format::Safetensors ||
                           f == Format::SafetensorsIndex || f == Format::TorchSaveIndex ||
                           f == Format::MegatronLegacy;
    const Strictness s = asked.options.strictness;
    const bool checksAll =
        f == Format::MegatronTorchDist &&
        (s == Strictness::LogAll || s == Strictness::RaiseAll || s == Strictness::ReturnAll);
    const std::string why =
        stateDict   ? (asked.options.strictLoad
                           ? "; a strict load_state_dict raises Unexpected key(s) on it"
                           : "; load_state_dict(strict=False) returns it among the unexpected keys")
        : checksAll ? "; megatron-core's load under --dist-ckpt-strictness " +
                          std::string(strictnessName(s)) + " names it"
                    : "; the load reads only the keys it asks for";
    std::vector<std::pair<size_t, FixUnused>> out;
    for (const UnconsumedKey &u : asked.unconsumed) {
        if (!u.tensor || u.key.starts_with("optimizer.") || u.entry < 0 ||
            size_t(u.entry) >= source.tensors.size() ||
            source.tensors[size_t(u.entry)].key != u.key)
            continue;
        const std::string what = recomputedBufferNote(u.key).empty()
                                     ? "no parameter of the model uses it"
                                     : "a buffer the model recomputes at init";
        out.emplace_back(size_t(u.entry), FixUnused{u.key, !stateDict && !checksAll, what + why});
    }
    return out;
}

FixPlan planFix(const CheckpointIndex &source, const DiffResult &asked, const DiffResult &found)
{
    return Planner(source, asked, found).run();
}

namespace {

// Removes the entries at `at` (ascending) from `v`, keeping the order of the rest.
template<typename T>
void eraseAt(std::vector<T> &v, const std::vector<size_t> &at)
{
    size_t next = 0, kept = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (next < at.size() && at[next] == i) {
            ++next;
            continue;
        }
        if (kept != i)
            v[kept] = std::move(v[i]);
        ++kept;
    }
    v.resize(kept);
}

} // namespace

CheckpointIndex applyFix(CheckpointIndex source, FixPlan &plan)
{
    CheckpointIndex out = std::move(source);
    eraseAt(out.tensors, plan.dropped);
    eraseAt(out.objects, plan.droppedObjects);
    plan.firstNew = out.tensors.size();
    plan.firstNewObject = out.objects.size();
    for (TensorEntry &t : plan.tensors)
        out.tensors.push_back(std::move(t));
    for (ObjectEntry &o : plan.objects)
        out.objects.push_back(std::move(o));
    plan.tensors.clear();
    plan.objects.clear();
    // The repaired index is a new checkpoint: what the open found about the source's problems
    // and provenance is not its.
    out.problems.clear();
    out.info.erase("repaired_from");
    return out;
}

} // namespace shardscope::detail
