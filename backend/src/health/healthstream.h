// SPDX-License-Identifier: MIT
#pragma once

#include "kernels/healthcore.h"
#include "shardscope/health.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace shardscope::detail {

/** The kernels' element code of a dtype (kernels::ElemCode; a complex dtype's parts'); nullopt
 *  for those they lack. */
std::optional<int> kernelCode(DType t);
/** Kernel elements per element: 2 for complex dtypes (real and imaginary parts), else 1. */
int kernelParts(DType t);
/** kernels::foldSegment() on the CPU, through the vector path where it has one (same bits). */
kernels::Accum foldOnCpu(const unsigned char *bytes, int elemSize, int code, int64_t begin,
                         int64_t end);

/** computeHealth() on the CPU over `threads` threads (0: its own choice), the same bits. */
Result<TensorHealth> computeHealthOn(const TensorData &data, ComputeDevice device, int threads,
                                     int bins = 64);

/**
 * computeHealth() over a tensor that arrives in windows (one that does not fit the memory
 * budget), with exactly its results: pass one folds the windows in order into per-segment
 * accumulators merged in index order, as computeHealth does; pass two, once min and max are
 * known, counts the histogram and sums the fingerprint. Windows start at multiples of
 * kernels::kSegment elements. CPU only.
 */
class HealthStream
{
public:
    explicit HealthStream(DType dtype, int bins = 64);
    bool supported() const { return m_code >= 0; }
    /** Pass one: the window starting at element `first`; windows in order. */
    void fold(std::span<const std::byte> window, int64_t first);
    /** Pass two: any order, after every fold. */
    void count(std::span<const std::byte> window, int64_t first);
    TensorHealth finish() const;

private:
    int m_code = -1, m_elemSize = 1, m_bins;
    kernels::Accum m_total = kernels::emptyAccum();
    std::vector<unsigned long long> m_histogram;
    uint64_t m_fingerprint = 0;
};

} // namespace shardscope::detail
