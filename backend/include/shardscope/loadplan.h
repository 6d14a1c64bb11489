// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/diff.h"
#include "shardscope/layout.h"
#include "shardscope/tensor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardscope {

/** A run of a rank's local rows and the rows of the parameter they are. */
struct ShardPiece
{
    int64_t localRow = 0, paramRow = 0, rows = 0;
};

/**
 * What one rank holds of one parameter under Megatron-FSDP (docs/formats.md §6.2): a flat,
 * row-aligned slice [flatBegin, flatEnd) of the parameter's flattened TP-local tensor, i.e. its
 * local rows [flatBegin / rowSize, flatEnd / rowSize). Empty when flatBegin == flatEnd. Under TP
 * the local rows are runs of the parameter's rows (`pieces`: a fused parameter's TP-local tensor
 * is [s1_r; s2_r; …]), and a row-parallel one holds a column range of each row.
 */
struct ParamShard
{
    uint32_t param = 0; ///< index into Layout::params
    int64_t flatBegin = 0, flatEnd = 0;
    int64_t rowSize = 1; ///< elements of a local row
    int tpRank = 0;      ///< rank in the (expert) tensor-parallel group
    /** Elements [colBegin, colEnd) of each parameter row (TP on dim 1); [0, 0) = whole rows. */
    int64_t colBegin = 0, colEnd = 0;
    /** Another TP rank holds the same rows (a TP-replicated parameter): checked, not gathered. */
    bool replica = false;
    std::vector<ShardPiece> pieces; ///< in local-row order
    int64_t rows() const { return (flatEnd - flatBegin) / rowSize; }
    int64_t firstRow() const { return flatBegin / rowSize; }
};

/** One on-disk key's box that a rank reads to fill (part of) a shard. */
struct ShardRead
{
    uint32_t param = 0;
    std::string key;                     ///< on-disk key (after the rules)
    std::vector<int64_t> index;          ///< leading indices into a stacked key (torch_dist)
    std::vector<int64_t> offsets, sizes; ///< box of the stored tensor (after `index`)
    int64_t paramRow = 0;                ///< the box's first row, in the parameter's rows
    int64_t localRow = 0;                ///< …and in the rank's local shard
    int64_t rows() const { return sizes.empty() ? 1 : sizes[0]; }
};

/**
 * The read of `source` (a diff source of a parameter with `paramRows` rows) that fills the
 * parameter's rows [fromRow, toRow); nullopt when the source covers none of them.
 */
std::optional<ShardRead> sourceRead(const DiffSource &source, int64_t paramRows, int64_t fromRow,
                                    int64_t toRow);

/**
 * The tensor of `index` that `source` names: by its item number when the diff read this index
 * (DiffSource::entry, no search), else by key; nullptr when the index has none.
 */
const TensorEntry *sourceTensor(const CheckpointIndex &index, const DiffSource &source);

/** The Box to pass readTensor() for a read: stacked indices become size-1 leading dims. */
Box readBox(const ShardRead &read);

/** Where a rank sits in each process group (Megatron's order: tp, [cp,] ep, dp, pp). */
struct RankCoords
{
    int tp = 0, dp = 0, pp = 0;   ///< dense parameters
    int etp = 0, ep = 0, edp = 0; ///< expert parameters (within the pipeline stage)
};
/** `rank`'s place in the groups of `parallel` (Megatron's default order tp-cp-ep-dp-pp). */
RankCoords rankCoords(int rank, const ParallelConfig &parallel);

struct RankPlan
{
    int rank = 0;
    RankCoords coords;
    std::vector<ParamShard> shards;
    std::vector<ShardRead> reads;
    std::vector<uint32_t> unloadable; ///< params (layout indices) whose shard has no source
    uint64_t bytes = 0;               ///< bytes this rank reads
};

/** A Megatron-FSDP parameter group: one FSDP unit's (expert or not) flat buffer. */
struct BufferGroup
{
    std::vector<uint32_t> params; ///< in buffer order (row size descending)
    bool expert = false;
    int unit = -1;                ///< TransformerLayer index; -1 = outside any unit
    int stage = 0;                ///< pipeline stage
    int ep = -1;                  ///< expert groups: the EP rank whose experts these are
    int64_t chunkFactor = 1;      ///< lcm-ish of row sizes; shard bounds are its multiples
    int64_t size = 0;             ///< padded buffer size, elements
    std::vector<int64_t> offsets; ///< per param (same order as `params`), elements
};

struct LoadPlan
{
    int world = 1; ///< ranks planned: tp × dp × pp
    ParallelConfig parallel;
    int expertDp = 1; ///< expert data-parallel ranks: tp × dp / (etp × ep)
    std::vector<BufferGroup> groups;
    std::vector<RankPlan> ranks;
};

/**
 * Plans a Megatron-FSDP load of `layout` (its sources as `diff` found them) over
 * `layout.parallel` (tp × dpShard × pp ranks; experts over ep × etp × the expert-data-parallel
 * rest): each rank's flat slice of the TP-local tensor of every parameter of its stage
 * (Megatron-FSDP's row-aligned buffer layout: groups per FSDP unit = TransformerLayer, experts
 * apart), and the boxes of the on-disk keys (through the diff's rules) that fill it. Decoder layers
 * are split over the stages as Megatron does (the first and last stages' counts when given, the
 * rest evenly; embedding first, output layer and MTP last); names keep their global layer indices.
 */
Result<LoadPlan> planLoad(const Layout &layout, const DiffResult &diff);

} // namespace shardscope
