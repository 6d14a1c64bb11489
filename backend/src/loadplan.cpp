// SPDX-License-Identifier: MIT
// Megatron-FSDP load planning: each DP-shard rank's flat, row-aligned slice of every parameter
// (formats.md §6.2), and the stored boxes that fill it through the diff's sources.
#include "shardscope/loadplan.h"
#include "shapes.h"

#include <algorithm>
#include <numeric>
#include <regex>
#include <unordered_map>

namespace shardscope {

using detail::product;

namespace {

// FSDP units are TransformerLayers: decoder layers and MTP inner layers. Megatron-FSDP keeps
// expert and non-expert parameters of a unit in separate buffers.
int unitOf(const std::string &name, const Layout &layout, int decoderLayers)
{
    static const std::regex decoder(R"(^decoder\.layers\.(\d+)\.)");
    std::smatch m;
    if (std::regex_search(name, m, decoder))
        return std::stoi(m[1].str());
    const std::regex mtp("^mtp\\.layers\\.(\\d+)\\." + layout.mtpInner + "\\.");
    if (std::regex_search(name, m, mtp))
        return decoderLayers + std::stoi(m[1].str());
    return -1;
}

struct Item
{
    uint32_t param;
    int64_t numel, row;
    int64_t offset = -1;
};

// build_data_parallel_buffer_index: regular items back to back on chunk-size-factor boundaries,
// remainders paired into one cell, fragments (numel < factor) put into the gaps, largest first,
// and the rest packed into whole factor-sized slots, so that no item straddles a boundary it
// cannot be split at: every shard boundary is then a row boundary of every parameter.
void layoutGroup(std::vector<Item> &items, BufferGroup &g, int world)
{
    const int64_t csf = g.chunkFactor;
    std::vector<Item *> regular, fragments;
    for (Item &q : items)
        (q.numel >= csf ? regular : fragments).push_back(&q);
    std::stable_sort(fragments.begin(), fragments.end(),
                     [](const Item *a, const Item *b) { return a->numel > b->numel; });
    int64_t idx = 0;
    while (!regular.empty()) {
        Item *q = regular.front();
        regular.erase(regular.begin());
        q->offset = idx;
        if (q->numel % csf == 0) {
            idx += q->numel;
            continue;
        }
        int64_t gap = idx + q->numel;
        idx += (q->numel / csf + 1) * csf;
        const int64_t remain = q->numel % csf;
        int64_t space = csf - remain;
        for (auto it = regular.begin(); it != regular.end(); ++it) {
            const int64_t rr = (*it)->numel % csf;
            if (rr && remain + rr <= csf) {
                (*it)->offset = idx - rr;
                space -= rr;
                idx += (*it)->numel / csf * csf;
                regular.erase(it);
                break;
            }
        }
        for (auto it = fragments.begin(); it != fragments.end();) {
            if ((*it)->numel <= space) {
                (*it)->offset = gap;
                gap += (*it)->numel;
                space -= (*it)->numel;
                it = fragments.erase(it);
            } else {
                ++it;
            }
        }
    }
    std::vector<std::vector<Item *>> slots;
    for (Item *f : fragments) {
        bool placed = false;
        for (auto &s : slots) {
            int64_t used = 0;
            for (Item *x : s)
                used += x->numel;
            if (used + f->numel <= csf) {
                s.push_back(f);
                placed = true;
                break;
            }
        }
        if (!placed)
            slots.push_back({f});
    }
    for (auto &s : slots) {
        int64_t o = 0;
        for (Item *f : s) {
            f->offset = idx + o;
            o += f->numel;
        }
        idx += csf;
    }
    const int64_t cell = int64_t(world) * csf;
    g.size = (idx + cell - 1) / cell * cell;
}

} // namespace

std::optional<ShardRead> sourceRead(const DiffSource &s, int64_t paramRows, int64_t fromRow,
                                    int64_t toRow)
{
    const int64_t sb = s.begin, se = (s.begin == 0 && s.end == 0) ? paramRows : s.end;
    const int64_t from = std::max(fromRow, sb), to = std::min(toRow, se);
    if (from >= to)
        return std::nullopt;
    ShardRead read;
    read.key = s.key;
    read.index = s.index;
    const size_t lead = s.index.size();
    read.offsets.assign(s.shape.size() - lead, 0);
    read.sizes.assign(s.shape.begin() + std::ptrdiff_t(lead), s.shape.end());
    if (!read.sizes.empty()) {
        read.offsets[0] = from - sb + s.storedRow;
        read.sizes[0] = to - from;
    }
    read.paramRow = from;
    return read;
}

Box readBox(const ShardRead &read)
{
    Box b;
    b.offsets = read.index;
    b.sizes.assign(read.index.size(), 1);
    b.offsets.insert(b.offsets.end(), read.offsets.begin(), read.offsets.end());
    b.sizes.insert(b.sizes.end(), read.sizes.begin(), read.sizes.end());
    return b;
}

Result<LoadPlan> planLoad(const Layout &layout, const DiffResult &diff)
{
    const ParallelConfig &par = layout.parallel;
    if (par.tp != 1 || par.pp != 1 || par.etp != 1)
        return makeError(Error::Code::Unsupported,
                         "load planning covers Megatron-FSDP over DP-shard ranks (TP = PP = 1) so "
                         "far; the layout asks for tp " +
                             std::to_string(par.tp) + ", pp " + std::to_string(par.pp));
    LoadPlan plan;
    plan.world = std::max(1, par.dpShard);

    int decoderLayers = 0;
    {
        static const std::regex decoder(R"(^decoder\.layers\.(\d+)\.)");
        std::smatch m;
        for (const LayoutParam &p : layout.params)
            if (std::regex_search(p.name, m, decoder))
                decoderLayers = std::max(decoderLayers, std::stoi(m[1].str()) + 1);
    }

    // Parameters only (buffers are not in FSDP's buffers), grouped by (expert, unit) in order of
    // first appearance, then ordered by row size, largest first.
    std::vector<std::vector<Item>> groupItems;
    for (uint32_t i = 0; i < layout.params.size(); ++i) {
        const LayoutParam &p = layout.params[i];
        if (!p.hasOptimizerState || p.name.ends_with("._extra_state"))
            continue;
        const bool expert = p.expert >= 0 || p.name.find(".mlp.experts.") != std::string::npos;
        const int unit = unitOf(p.name, layout, decoderLayers);
        size_t g = 0;
        while (g < plan.groups.size() &&
               !(plan.groups[g].expert == expert && plan.groups[g].unit == unit))
            ++g;
        if (g == plan.groups.size()) {
            plan.groups.push_back({});
            plan.groups.back().expert = expert;
            plan.groups.back().unit = unit;
            groupItems.emplace_back();
        }
        const int64_t numel = product(p.shape, 0);
        const int64_t row = p.shape.size() > 1 ? product(p.shape, 1) : 1;
        groupItems[g].push_back({i, numel, row});
    }
    for (size_t g = 0; g < plan.groups.size(); ++g) {
        auto &items = groupItems[g];
        std::stable_sort(items.begin(), items.end(),
                         [](const Item &a, const Item &b) { return a.row > b.row; });
        int64_t csf = items.empty() ? 1 : items.front().row;
        for (const Item &q : items) {
            if (q.row == csf || (csf % q.row == 0 && q.numel % csf == 0) || q.numel < csf)
                continue;
            csf = std::lcm(csf, q.row);
        }
        BufferGroup &group = plan.groups[g];
        group.chunkFactor = std::max<int64_t>(csf, 1);
        layoutGroup(items, group, plan.world);
        for (const Item &q : items) {
            group.params.push_back(q.param);
            group.offsets.push_back(q.offset);
        }
    }

    // Sources per parameter (model section of the diff).
    std::vector<const DiffEntry *> entryOf(layout.params.size(), nullptr);
    {
        std::unordered_map<std::string, uint32_t> byName;
        for (uint32_t i = 0; i < layout.params.size(); ++i)
            byName.emplace(layout.params[i].name, i);
        for (const DiffEntry &e : diff.entries)
            if (e.section == Section::Model)
                if (auto it = byName.find(e.param); it != byName.end())
                    entryOf[it->second] = &e;
    }

    for (int r = 0; r < plan.world; ++r) {
        RankPlan rp;
        rp.rank = r;
        for (const BufferGroup &g : plan.groups) {
            const int64_t shard = g.size / plan.world, lo = r * shard, hi = lo + shard;
            for (size_t k = 0; k < g.params.size(); ++k) {
                const LayoutParam &p = layout.params[g.params[k]];
                const int64_t numel = product(p.shape, 0);
                const int64_t row = p.shape.size() > 1 ? product(p.shape, 1) : 1;
                int64_t a = std::clamp<int64_t>(lo - g.offsets[k], 0, numel);
                int64_t b = std::clamp<int64_t>(hi - g.offsets[k], 0, numel);
                if (a >= b)
                    a = b = 0;
                if (a % row || b % row)
                    return makeError(Error::Code::Internal, "shard bound inside a row of " +
                                                                p.name + " (rank " +
                                                                std::to_string(r) + ")");
                rp.shards.push_back({g.params[k], a, b, row});
                if (a == b)
                    continue;
                const DiffEntry *e = entryOf[g.params[k]];
                if (!e || !e->realLoadFills) {
                    rp.unloadable.push_back(g.params[k]);
                    continue;
                }
                const int64_t r0 = a / row, r1 = b / row;
                const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
                for (const DiffSource &s : e->sources) {
                    auto read = sourceRead(s, rows, r0, r1);
                    if (!read)
                        continue;
                    read->param = g.params[k];
                    rp.bytes +=
                        uint64_t(read->rows() * row) *
                        uint64_t(elementSize(dtypeFromName(s.dtype).value_or(DType::Unknown)));
                    rp.reads.push_back(std::move(*read));
                }
            }
        }
        plan.ranks.push_back(std::move(rp));
    }
    return plan;
}

} // namespace shardscope
