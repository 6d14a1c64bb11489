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

/**
 * What one rank holds of one parameter under Megatron-FSDP (formats.md §6.2): a flat,
 * row-aligned slice [flatBegin, flatEnd) of the parameter's flattened (TP-local) tensor, i.e.
 * rows [flatBegin / rowSize, flatEnd / rowSize). Empty when flatBegin == flatEnd.
 */
struct ParamShard
{
    uint32_t param = 0; ///< index into Layout::params
    int64_t flatBegin = 0, flatEnd = 0;
    int64_t rowSize = 1;
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
    int64_t rows() const { return sizes.empty() ? 1 : sizes[0]; }
};

/**
 * The read of `source` (a diff source of a parameter with `paramRows` rows) that fills the
 * parameter's rows [fromRow, toRow); nullopt when the source covers none of them.
 */
std::optional<ShardRead> sourceRead(const DiffSource &source, int64_t paramRows, int64_t fromRow,
                                    int64_t toRow);

/** The Box to pass readTensor() for a read: stacked indices become size-1 leading dims. */
Box readBox(const ShardRead &read);

struct RankPlan
{
    int rank = 0;
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
    int64_t chunkFactor = 1;      ///< lcm-ish of row sizes; shard bounds are its multiples
    int64_t size = 0;             ///< padded buffer size, elements
    std::vector<int64_t> offsets; ///< per param (same order as `params`), elements
};

struct LoadPlan
{
    int world = 1; ///< DP-shard ranks planned
    std::vector<BufferGroup> groups;
    std::vector<RankPlan> ranks;
};

/**
 * Plans a Megatron-FSDP load of `layout` (its sources as `diff` found them) over
 * `layout.parallel.dpShard` ranks: each rank's flat slice of every parameter (Megatron-FSDP's
 * row-aligned buffer layout: groups per FSDP unit = TransformerLayer, experts apart), and the boxes
 * of the on-disk keys (through the diff's rules) that fill it. TP > 1 is not planned yet (an error
 * says so).
 */
Result<LoadPlan> planLoad(const Layout &layout, const DiffResult &diff);

} // namespace shardscope
