// SPDX-License-Identifier: MIT
// The value difference's host vector path (kernels/diffsimd.h) against the shared scalar code
// the device runs (kernels/diffcore.h): the same bits for pairs of every class (equal, close,
// far, signed zeros, denormals, NaN and infinities on either side), every alignment and tail;
// and the rounding helpers the ULP measure uses, exhaustively where the domain is small.
#include "kernels/diffsimd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace shardscope::kernels;

namespace {

bool sameBits(const DiffAccum &a, const DiffAccum &b)
{
    return a.count == b.count && a.differing == b.differing && a.firstDiff == b.firstDiff &&
           a.outside == b.outside && a.nonfinite == b.nonfinite && a.maxUlp == b.maxUlp &&
           a.maxAbsAt == b.maxAbsAt && std::memcmp(&a.maxAbs, &b.maxAbs, 8) == 0 &&
           std::memcmp(&a.maxRel, &b.maxRel, 8) == 0 && std::memcmp(&a.sumAbs, &b.sumAbs, 8) == 0 &&
           std::memcmp(&a.sumSq, &b.sumSq, 8) == 0 && std::memcmp(&a.sumA2, &b.sumA2, 8) == 0 &&
           std::memcmp(&a.sumB2, &b.sumB2, 8) == 0 && std::memcmp(&a.sumAB, &b.sumAB, 8) == 0;
}

// Pairs of float32 bits: mostly b = a moved by a few ULPs or equal, some far, some of another
// class once in `oddEvery` (0: never).
void pairs32(size_t n, uint32_t seed, uint32_t oddEvery, std::vector<uint32_t> &a,
             std::vector<uint32_t> &b)
{
    std::mt19937 rng(seed);
    const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u,
                                0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu};
    std::normal_distribution<float> normal(0.0f, 0.02f);
    a.resize(n);
    b.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const float f = normal(rng);
        std::memcpy(&a[i], &f, 4);
        const uint32_t r = rng() % 8;
        b[i] = r < 4 ? a[i] : r < 7 ? a[i] + (rng() % 5) - 2 : rng();
        if (oddEvery && rng() % oddEvery == 0)
            (rng() % 2 ? a[i] : b[i]) = special[rng() % std::size(special)];
    }
}

template<int Code, int Size>
void compare(const unsigned char *a, const unsigned char *b, int64_t n, const DiffParams &p)
{
    for (int64_t begin : {int64_t(0), int64_t(1), int64_t(3), int64_t(5)})
        for (int64_t end = n - 9; end <= n; ++end) {
            unsigned long long hw[kDiffBins] = {}, hg[kDiffBins] = {};
            const DiffAccum want = diffRange<Code, Size, Code, Size>(a, b, begin, end, 77, p, hw);
            const DiffAccum got = simd::diffRange<Code, Size>(a, b, begin, end, 77, p, hg);
            ASSERT_TRUE(sameBits(want, got))
                << "code " << Code << " [" << begin << ", " << end << "): differing "
                << want.differing << "/" << got.differing << ", first " << want.firstDiff << "/"
                << got.firstDiff << ", max at " << want.maxAbsAt << "/" << got.maxAbsAt << ", ulp "
                << want.maxUlp << "/" << got.maxUlp;
            ASSERT_EQ(0, std::memcmp(hw, hg, sizeof hw)) << "histogram, code " << Code;
        }
}

} // namespace

TEST(ValueDiffSimd, Float32SameAsScalar)
{
    for (uint32_t oddEvery : {0u, 97u, 3u}) {
        std::vector<uint32_t> a, b;
        pairs32(1000, 11 + oddEvery, oddEvery, a, b);
        for (const DiffParams &p : {DiffParams{0, 0, kF32, true}, DiffParams{1e-3, 1e-2, -1, true}})
            compare<kF32, 4>(reinterpret_cast<const unsigned char *>(a.data()),
                             reinterpret_cast<const unsigned char *>(b.data()), 1000, p);
    }
}

TEST(ValueDiffSimd, SixteenBitFloatsSameAsScalar)
{
    for (uint32_t oddEvery : {0u, 97u, 3u}) {
        std::vector<uint32_t> a32, b32;
        pairs32(1000, 21 + oddEvery, oddEvery, a32, b32);
        std::vector<uint16_t> ab(a32.size()), bb(a32.size()), ah(a32.size()), bh(a32.size());
        for (size_t i = 0; i < a32.size(); ++i) {
            ab[i] = uint16_t(bf16Bits(a32[i])); // bfloat16: the upper halves, rounded
            bb[i] = uint16_t(bf16Bits(b32[i]));
            ah[i] = uint16_t(f16Bits(a32[i])); // float16, denormals among them
            bh[i] = uint16_t(f16Bits(b32[i]));
        }
        compare<kBF16, 2>(reinterpret_cast<const unsigned char *>(ab.data()),
                          reinterpret_cast<const unsigned char *>(bb.data()), 1000,
                          DiffParams{0, 0, kBF16, true});
        compare<kF16, 2>(reinterpret_cast<const unsigned char *>(ah.data()),
                         reinterpret_cast<const unsigned char *>(bh.data()), 1000,
                         DiffParams{0, 0, kF16, true});
    }
}

// Every float16 value converts back to its own bits through float32 (the ULP measure's grid),
// and every bfloat16 likewise: the rounding helpers are exact where nothing needs rounding.
TEST(ValueDiffRounding, SixteenBitRoundTripsExactly)
{
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const Decoded d = decode(reinterpret_cast<const unsigned char *>(&h), kF16);
        if (d.nan || d.inf)
            continue;
        const float f = float(d.value);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        ASSERT_EQ(h, f16Bits(u)) << "float16 bits " << h;
        const uint32_t bf = h << 16;
        ASSERT_EQ(h, bf16Bits(bf)) << "bfloat16 bits " << h;
    }
}

// Rounding to float16 is to the nearest, ties to even: at every halfway point between two
// float16 values, and just either side of it.
TEST(ValueDiffRounding, Float16RoundsToNearestEven)
{
    for (uint32_t h = 0; h < 0x7bffu; ++h) {
        double lo, hi;
        const uint32_t h1 = h + 1;
        lo = decode(reinterpret_cast<const unsigned char *>(&h), kF16).value;
        hi = decode(reinterpret_cast<const unsigned char *>(&h1), kF16).value;
        const float mid = float((lo + hi) / 2); // exact in float32
        uint32_t u;
        std::memcpy(&u, &mid, 4);
        ASSERT_EQ((h & 1u) ? h1 : h, f16Bits(u)) << "tie between " << h << " and " << h1;
        ASSERT_EQ(h, f16Bits(u - 1)) << "below the tie after " << h;
        ASSERT_EQ(h1, f16Bits(u + 1)) << "above the tie after " << h;
    }
}
