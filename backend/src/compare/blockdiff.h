// SPDX-License-Identifier: MIT
#pragma once

#include "kernels/diffcore.h"

#include <array>
#include <cstddef>
#include <string>

namespace shardscope::detail {

/** A tensor pair's differences so far: blocks merge in order. */
struct BlockTotals
{
    kernels::DiffAccum diff = kernels::emptyDiff();
    kernels::Accum a = kernels::emptyAccum(), b = kernels::emptyAccum();
    std::array<unsigned long long, kernels::kDiffBins> hist{};
};

/** One side's bytes in a block: its element code and size. */
struct BlockSide
{
    const std::byte *bytes;
    int code, size;
};

/**
 * `n` pairs, the first at flat index `base` (a multiple of kernels::kSegment, so that segments
 * are the same whatever the blocks), merged into `t`: on the GPU when `gpu` and it works (the
 * device's name into `device`), else on the CPU over `threads` threads. Same bits either way.
 */
void diffBlock(const BlockSide &a, const BlockSide &b, int64_t n, int64_t base,
               const kernels::DiffParams &params, int threads, bool gpu, BlockTotals &t,
               std::string &device);

} // namespace shardscope::detail
