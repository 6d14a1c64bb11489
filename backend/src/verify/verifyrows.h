// SPDX-License-Identifier: MIT
#pragma once
// Rows of a parameter between a rank's local shard and a window of the gathered tensor.

#include "shardscope/loadplan.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shardscope::detail {

/**
 * A known, non-zero "initial value" pattern: a parameter no source fills must still hold it.
 * Byte k of the pattern is byte k % 8 of word k / 8, so any window of it can be made alone:
 * `offset` is the window's first byte in the whole tensor.
 */
void fillInitial(std::span<std::byte> bytes, uint64_t seed, uint64_t offset = 0);

/** A run of a rank's local rows that are the parameter's rows [paramLo, paramHi). */
struct RowRun
{
    int64_t paramLo, paramHi, localLo;
    size_t at; ///< where the run starts in the rank's payload
};

/**
 * The runs of `shard`'s local rows (its pieces, clipped to the parameter's rows [from, to)),
 * back to back in a payload whose rows are localRowBytes each; returns the payload's size.
 */
size_t rowRunsOf(const ParamShard &shard, int64_t from, int64_t to, int64_t localRowBytes,
                 std::vector<RowRun> &runs);

/**
 * Copies between a payload and the parameter's rows [from, …) in `window` (whole rows of
 * rowBytes): into the window when toWindow, out of it otherwise. A row-parallel shard holds
 * bytes [colBegin, colEnd) of each row.
 */
void moveRows(const ParamShard &shard, const std::vector<RowRun> &runs, int64_t from,
              std::span<std::byte> window, std::span<std::byte> payload, int64_t rowBytes,
              int64_t elementSize, bool toWindow);

} // namespace shardscope::detail
