// SPDX-License-Identifier: MIT
// GPU-only: the value comparison's CUDA path against its CPU path (vector and scalar code) on
// pairs of several dtypes and sizes, blocks merged as the engine merges them. Skips without a
// CUDA device (label: gpu).
#include "compare/blockdiff.h"

#include <shardscope/devices.h>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace shardscope;
using namespace shardscope::kernels;

namespace {

std::vector<std::byte> randomBytes(size_t n, uint64_t seed)
{
    std::vector<std::byte> v(n);
    std::mt19937_64 g(seed);
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t x = g();
        std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
    }
    return v;
}

} // namespace

TEST(ValueDiffGpu, SameAsCpu)
{
    if (!builtWithCuda() || cudaDevices().empty())
        GTEST_SKIP() << "no CUDA device";
    struct Case
    {
        int codeA, sizeA, codeB, sizeB;
    };
    for (const Case c : {Case{kF32, 4, kF32, 4}, Case{kBF16, 2, kBF16, 2}, Case{kF16, 2, kF16, 2},
                         Case{kF32, 4, kBF16, 2}, Case{kI64, 8, kI64, 8}})
        for (int64_t n : {int64_t(1), int64_t(4097), (int64_t(1) << 20) + 5}) {
            auto a = randomBytes(size_t(n * c.sizeA), uint64_t(n) + 1);
            auto b = randomBytes(size_t(n * c.sizeB), uint64_t(n) + 2);
            if (c.sizeA == c.sizeB) // half the pairs equal
                std::memcpy(b.data(), a.data(), b.size() / 2);
            const DiffParams p{1e-3, 1e-2, c.codeA == c.codeB && c.codeA != kI64 ? c.codeA : -1,
                               c.codeA == c.codeB};
            detail::BlockTotals cpu, gpu;
            std::string cpuDevice, gpuDevice;
            // Two blocks each, the second starting at a segment boundary, as the engine cuts.
            const int64_t half = std::min<int64_t>(n, kSegment);
            for (auto [t, useGpu, dev] :
                 {std::tuple{&cpu, false, &cpuDevice}, std::tuple{&gpu, true, &gpuDevice}}) {
                detail::diffBlock({a.data(), c.codeA, c.sizeA}, {b.data(), c.codeB, c.sizeB}, half,
                                  0, p, 2, useGpu, *t, *dev);
                if (n > half)
                    detail::diffBlock({a.data() + half * c.sizeA, c.codeA, c.sizeA},
                                      {b.data() + half * c.sizeB, c.codeB, c.sizeB}, n - half, half,
                                      p, 2, useGpu, *t, *dev);
            }
            ASSERT_NE(gpuDevice, "cpu") << "the GPU path did not run";
            EXPECT_EQ(0, std::memcmp(&cpu.diff, &gpu.diff, sizeof cpu.diff)) << c.codeA << " " << n;
            EXPECT_EQ(0, std::memcmp(&cpu.a, &gpu.a, sizeof cpu.a)) << c.codeA << " " << n;
            EXPECT_EQ(0, std::memcmp(&cpu.b, &gpu.b, sizeof cpu.b)) << c.codeA << " " << n;
            EXPECT_EQ(cpu.hist, gpu.hist) << c.codeA << " " << n;
        }
}
