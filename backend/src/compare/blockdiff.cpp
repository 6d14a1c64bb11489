// SPDX-License-Identifier: MIT
#include "compare/blockdiff.h"
#include "health/healthstream.h"
#include "kernels/cpuclones.h"
#include "kernels/diffdevice.h"
#include "kernels/diffsimd.h"
#include "shardscope/devices.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace shardscope::detail {

using namespace kernels;

namespace {

// One segment on the CPU: two sides of one float dtype through the vector path, any other pair
// through the shared scalar code. The same bits either way.
SS_CPU_CLONES DiffAccum cpuDiffSegment(const unsigned char *a, int codeA, int sizeA,
                                       const unsigned char *b, int codeB, int sizeB, int64_t begin,
                                       int64_t end, int64_t base, const DiffParams &p,
                                       unsigned long long *hist)
{
    if (codeA == codeB)
        switch (codeA) {
        case kF32:
            return simd::diffRange<kF32, 4>(a, b, begin, end, base, p, hist);
        case kBF16:
            return simd::diffRange<kBF16, 2>(a, b, begin, end, base, p, hist);
        case kF16:
            return simd::diffRange<kF16, 2>(a, b, begin, end, base, p, hist);
        default:
            break;
        }
    return diffSegment(a, codeA, sizeA, b, codeB, sizeB, begin, end, base, p, hist);
}

} // namespace

void diffBlock(const BlockSide &a, const BlockSide &b, int64_t n, int64_t base,
               const DiffParams &params, int threads, bool gpu, BlockTotals &t, std::string &device)
{
    const auto *pa = reinterpret_cast<const unsigned char *>(a.bytes);
    const auto *pb = reinterpret_cast<const unsigned char *>(b.bytes);
    if (gpu) {
        const char *error = nullptr;
        BlockTotals g = t;
        if (deviceValueDiff(pa, a.code, a.size, pb, b.code, b.size, n, base, params, g.diff,
                            g.hist.data(), g.a, g.b, error)) {
            t = g;
            if (device.empty() || device == "cpu") {
                const auto devices = cudaDevices();
                device = devices.empty() ? "cuda" : devices.front().name;
            }
            return;
        }
    }
    if (device.empty())
        device = "cpu";
    const int64_t segments = (n + kSegment - 1) / kSegment;
    std::vector<DiffAccum> diffs(static_cast<size_t>(segments));
    std::vector<Accum> sideA(static_cast<size_t>(segments)), sideB(static_cast<size_t>(segments));
    const int workers = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(segments, 1)));
    std::vector<std::array<unsigned long long, kDiffBins>> hists(static_cast<size_t>(workers));
    auto work = [&](int w) {
        hists[size_t(w)].fill(0);
        // Contiguous runs of segments per worker; the merge below is in index order anyway.
        const int64_t from = segments * w / workers, to = segments * (w + 1) / workers;
        for (int64_t s = from; s < to; ++s) {
            const int64_t begin = s * kSegment, end = std::min(n, begin + kSegment);
            diffs[size_t(s)] = cpuDiffSegment(pa, a.code, a.size, pb, b.code, b.size, begin, end,
                                              base, params, hists[size_t(w)].data());
            sideA[size_t(s)] = foldOnCpu(pa, a.size, a.code, begin, end);
            sideB[size_t(s)] = foldOnCpu(pb, b.size, b.code, begin, end);
        }
    };
    std::vector<std::thread> pool;
    for (int w = 1; w < workers; ++w)
        pool.emplace_back(work, w);
    work(0);
    for (std::thread &th : pool)
        th.join();
    for (int64_t s = 0; s < segments; ++s) {
        mergeDiff(t.diff, diffs[size_t(s)]);
        merge(t.a, sideA[size_t(s)]);
        merge(t.b, sideB[size_t(s)]);
    }
    for (const auto &h : hists)
        for (int k = 0; k < kDiffBins; ++k)
            t.hist[size_t(k)] += h[size_t(k)];
}

} // namespace shardscope::detail
