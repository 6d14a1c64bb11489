// SPDX-License-Identifier: MIT
// Megatron-FSDP load planning: each DP-shard rank's flat, row-aligned slice of every parameter
// (docs/formats.md §6.2), and the stored boxes that fill it through the diff's sources.
#include "shardscope/loadplan.h"
#include "common/shapes.h"

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

const TensorEntry *sourceTensor(const CheckpointIndex &index, const DiffSource &s)
{
    if (s.entry >= 0 && size_t(s.entry) < index.tensors.size() &&
        index.tensors[size_t(s.entry)].key == s.key)
        return &index.tensors[size_t(s.entry)];
    return index.findTensor(s.key);
}

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

RankCoords rankCoords(int rank, const ParallelConfig &par)
{
    const int tp = std::max(1, par.tp), dp = std::max(1, par.dpShard);
    const int etp = std::max(1, par.etp), ep = std::max(1, par.ep);
    RankCoords c;
    c.tp = rank % tp;
    c.dp = (rank / tp) % dp;
    c.pp = rank / (tp * dp);
    const int inStage = rank % (tp * dp);
    c.etp = inStage % etp;
    c.ep = (inStage / etp) % ep;
    c.edp = inStage / (etp * ep);
    return c;
}

namespace {

Error planError(const std::string &what)
{
    return makeError(Error::Code::Unsupported, what);
}

// What a parameter is under the parallel configuration: its stage, its expert group, and its
// TP-local shape with the runs of rows a TP rank holds.
struct ParamInfo
{
    bool planned = false;
    bool expert = false;
    int unit = -1, stage = 0, ep = 0;
    int tpSize = 1, tpDim = -1;
    std::vector<int64_t> local;    ///< TP-local shape
    std::vector<int64_t> sections; ///< full rows of each section along dim 0 (TP dim 0)
    int64_t numel = 0, row = 1;    ///< of the TP-local tensor
};

std::string str(int64_t v)
{
    return std::to_string(v);
}

} // namespace

Result<LoadPlan> planLoad(const Layout &layout, const DiffResult &diff)
{
    ParallelConfig par = layout.parallel;
    for (int *v : {&par.tp, &par.pp, &par.ep, &par.etp, &par.dpShard})
        *v = std::max(1, *v);
    const int stageRanks = par.tp * par.dpShard;
    if (stageRanks % (par.etp * par.ep))
        return planError("tp × dp = " + str(stageRanks) + " ranks a stage is not a multiple of " +
                         "etp × ep = " + str(par.etp * par.ep));
    if (par.ep > 1 && (layout.numExperts <= 0 || layout.numExperts % par.ep))
        return planError(str(layout.numExperts) + " experts do not divide over ep " + str(par.ep));
    if (par.ep > 1 && !layout.expertsGlobal)
        return planError("the layout names experts with EP-local indices (one EP rank's model); "
                         "planning over ep needs the whole model's layout");
    LoadPlan plan;
    plan.parallel = par;
    plan.world = stageRanks * par.pp;
    plan.expertDp = stageRanks / (par.etp * par.ep);

    auto stageEnds = decoderStageEnds(layout);
    if (!stageEnds)
        return stageEnds.error();
    const std::vector<int> &stageEnd = *stageEnds;
    const int decoderLayers = stageEnd.back();
    auto stageOfLayer = [&](int layer) {
        return int(std::upper_bound(stageEnd.begin(), stageEnd.end(), layer) - stageEnd.begin());
    };

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
    const bool torchDist = diff.format == formatName(Format::MegatronTorchDist);

    // Parameters, grouped by (stage, unit, expert, EP rank) in order of first appearance, then
    // ordered by TP-local row size, largest first.
    std::vector<ParamInfo> info(layout.params.size());
    std::vector<std::vector<Item>> groupItems;
    const int expertsPerRank = par.ep > 1 ? layout.numExperts / par.ep : 0;
    // Buffers (a router's expert_bias) are no FSDP buffer's: every rank of their stage loads
    // them whole, so one rank a stage (TP and DP rank 0) reads and checks each.
    std::vector<uint32_t> buffers;
    auto placeOf = [&](const LayoutParam &p, ParamInfo &q) {
        q.expert = p.expert >= 0 || p.name.find(".mlp.experts.") != std::string::npos;
        q.unit = unitOf(p.name, layout, decoderLayers);
        if (q.unit >= 0 && q.unit < decoderLayers)
            q.stage = std::min(stageOfLayer(q.unit), par.pp - 1);
        else if (p.name.starts_with("mtp.") || p.name.starts_with("output_layer.") ||
                 p.name.starts_with("decoder.final_layernorm."))
            q.stage = par.pp - 1;
    };
    for (uint32_t i = 0; i < layout.params.size(); ++i) {
        const LayoutParam &p = layout.params[i];
        if (p.name.ends_with("._extra_state"))
            continue;
        ParamInfo &q = info[i];
        if (!p.hasOptimizerState) {
            placeOf(p, q);
            if (q.expert && par.ep > 1 && p.expert >= 0)
                q.ep = p.expert / expertsPerRank;
            q.numel = product(p.shape, 0);
            q.row = p.shape.size() > 1 ? product(p.shape, 1) : 1;
            buffers.push_back(i);
            continue;
        }
        q.planned = true;
        placeOf(p, q);
        if (q.expert && par.ep > 1) {
            if (p.expert < 0)
                return planError("expert parameter without an expert index: " + p.name);
            q.ep = p.expert / expertsPerRank;
        }
        q.tpSize = q.expert ? par.etp : par.tp;
        q.tpDim = q.tpSize > 1 ? p.tpDim : -1;
        q.local = p.shape;
        if (q.tpDim >= 0) {
            if (q.tpDim > 1 || size_t(q.tpDim) >= p.shape.size() ||
                p.shape[size_t(q.tpDim)] % q.tpSize)
                return planError(p.name + ": dim " + str(q.tpDim) + " of its shape does not " +
                                 "split over " + str(q.tpSize) + " TP ranks");
            q.local[size_t(q.tpDim)] /= q.tpSize;
            // A fused parameter's TP-local tensor is [s1_r; s2_r; …]. Its rows are the sections'
            // (in section order) unless it is stored fused as a DTensor, whose global tensor is
            // the TP-local tensors back to back.
            const DiffEntry *e = entryOf[i];
            if (q.tpDim == 0 && p.fusion) {
                if (p.fusion->tpLocal)
                    return planError(p.name + ": TP-local fused shapes (Megatron-Bridge GDN) are "
                                              "not planned over TP");
                if (torchDist || !e || e->sources.size() > 1)
                    for (const FusedSection &fs : p.fusion->sections)
                        q.sections.push_back(fs.size);
            }
            if (q.sections.empty())
                q.sections.push_back(p.shape[0]);
            for (int64_t s : q.sections)
                if (q.tpDim == 0 && s % q.tpSize)
                    return planError(p.name + ": a section of " + str(s) + " rows does not " +
                                     "split over " + str(q.tpSize) + " TP ranks");
        }
        q.numel = product(q.local, 0);
        q.row = q.local.size() > 1 ? product(q.local, 1) : 1;
        size_t g = 0;
        while (g < plan.groups.size() &&
               !(plan.groups[g].stage == q.stage && plan.groups[g].unit == q.unit &&
                 plan.groups[g].expert == q.expert && plan.groups[g].ep == (q.expert ? q.ep : -1)))
            ++g;
        if (g == plan.groups.size()) {
            BufferGroup group;
            group.expert = q.expert;
            group.unit = q.unit;
            group.stage = q.stage;
            group.ep = q.expert ? q.ep : -1;
            plan.groups.push_back(std::move(group));
            groupItems.emplace_back();
        }
        groupItems[g].push_back({i, q.numel, q.row});
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
        layoutGroup(items, group, group.expert ? plan.expertDp : par.dpShard);
        for (const Item &q : items) {
            group.params.push_back(q.param);
            group.offsets.push_back(q.offset);
        }
    }

    for (int r = 0; r < plan.world; ++r) {
        RankPlan rp;
        rp.rank = r;
        rp.coords = rankCoords(r, par);
        const RankCoords &c = rp.coords;
        for (const BufferGroup &g : plan.groups) {
            if (g.stage != c.pp || (g.expert && g.ep != c.ep))
                continue;
            const int shards = g.expert ? plan.expertDp : par.dpShard;
            const int64_t shard = g.size / shards, lo = (g.expert ? c.edp : c.dp) * shard,
                          hi = lo + shard;
            for (size_t k = 0; k < g.params.size(); ++k) {
                const uint32_t pi = g.params[k];
                const LayoutParam &p = layout.params[pi];
                const ParamInfo &q = info[pi];
                int64_t a = std::clamp<int64_t>(lo - g.offsets[k], 0, q.numel);
                int64_t b = std::clamp<int64_t>(hi - g.offsets[k], 0, q.numel);
                if (a >= b)
                    a = b = 0;
                if (a % q.row || b % q.row)
                    return makeError(Error::Code::Internal, "shard bound inside a row of " +
                                                                p.name + " (rank " + str(r) + ")");
                ParamShard sh;
                sh.param = pi;
                sh.flatBegin = a;
                sh.flatEnd = b;
                sh.rowSize = q.row;
                sh.tpRank = g.expert ? c.etp : c.tp;
                sh.replica = q.tpSize > 1 && q.tpDim < 0 && sh.tpRank > 0;
                const int64_t l0 = a / q.row, l1 = b / q.row;
                if (q.tpDim == 0) { // each section's TP-local rows are its rows t·r_j + …
                    int64_t localAt = 0, fullAt = 0;
                    for (int64_t s : q.sections) {
                        const int64_t rj = s / q.tpSize, x0 = std::max(l0, localAt),
                                      x1 = std::min(l1, localAt + rj);
                        if (x0 < x1)
                            sh.pieces.push_back(
                                {x0, fullAt + sh.tpRank * rj + (x0 - localAt), x1 - x0});
                        localAt += rj;
                        fullAt += s;
                    }
                } else if (l1 > l0) {
                    sh.pieces.push_back({l0, l0, l1 - l0});
                }
                if (q.tpDim == 1) {
                    const int64_t inner = p.shape.size() > 2 ? product(p.shape, 2) : 1;
                    sh.colBegin = sh.tpRank * q.local[1] * inner;
                    sh.colEnd = sh.colBegin + q.local[1] * inner;
                }
                rp.shards.push_back(sh);
                if (a == b)
                    continue;
                const DiffEntry *e = entryOf[pi];
                // A wrong source is planned as the load reads it (the check says it is wrong).
                if (!e || (!e->realLoadFills && !e->wrongSource)) {
                    rp.unloadable.push_back(pi);
                    continue;
                }
                const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
                for (const ShardPiece &piece : sh.pieces)
                    for (const DiffSource &s : e->sources) {
                        auto read =
                            sourceRead(s, rows, piece.paramRow, piece.paramRow + piece.rows);
                        if (!read)
                            continue;
                        read->param = pi;
                        read->localRow = piece.localRow + (read->paramRow - piece.paramRow);
                        if (q.tpDim == 1) { // the rank's columns of the stored tensor
                            if (read->sizes.size() < 2 || read->sizes[1] != p.shape[1])
                                return planError(s.key +
                                                 ": stored shape does not match the "
                                                 "columns of " +
                                                 p.name);
                            read->offsets[1] += sh.tpRank * q.local[1];
                            read->sizes[1] = q.local[1];
                        }
                        rp.bytes +=
                            uint64_t(read->rows() * q.row) *
                            uint64_t(elementSize(dtypeFromName(s.dtype).value_or(DType::Unknown)));
                        rp.reads.push_back(std::move(*read));
                    }
            }
        }
        for (uint32_t pi : buffers) {
            const LayoutParam &p = layout.params[pi];
            const ParamInfo &q = info[pi];
            if (q.stage != c.pp || c.tp != 0 || c.dp != 0 ||
                (q.expert && par.ep > 1 && q.ep != c.ep))
                continue;
            ParamShard sh;
            sh.param = pi;
            sh.flatEnd = q.numel;
            sh.rowSize = q.row;
            const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
            if (q.numel > 0)
                sh.pieces.push_back({0, 0, rows});
            rp.shards.push_back(sh);
            if (q.numel == 0)
                continue;
            const DiffEntry *e = entryOf[pi];
            if (!e || (!e->realLoadFills && !e->wrongSource)) {
                rp.unloadable.push_back(pi);
                continue;
            }
            for (const DiffSource &src : e->sources) {
                auto read = sourceRead(src, rows, 0, rows);
                if (!read)
                    continue;
                read->param = pi;
                read->localRow = read->paramRow;
                rp.bytes +=
                    uint64_t(read->rows() * q.row) *
                    uint64_t(elementSize(dtypeFromName(src.dtype).value_or(DType::Unknown)));
                rp.reads.push_back(std::move(*read));
            }
        }
        plan.ranks.push_back(std::move(rp));
    }
    return plan;
}

} // namespace shardscope
