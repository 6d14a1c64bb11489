// SPDX-License-Identifier: MIT
// The host's vector path (kernels/healthsimd.h) against the shared scalar code the device runs:
// the same bits for every class of element (NaN, infinities, zeros, denormals, normals), every
// alignment of a range and every tail length.
#include "kernels/healthsimd.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace shardscope::kernels;

namespace {

// Normal values and zeros, with an element of another class (NaN, infinity, denormal, …) once
// in `oddEvery` on average (0: never).
std::vector<uint32_t> mixedFloat32(size_t n, uint32_t seed, uint32_t oddEvery = 2)
{
    std::mt19937 rng(seed);
    const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                                0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u,
                                0x7f7fffffu, 0xff7fffffu, 0x00800000u};
    std::vector<uint32_t> v(n);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (uint32_t &x : v) {
        if (oddEvery && rng() % oddEvery == 0) {
            x = special[rng() % std::size(special)];
        } else if (rng() % 64 == 0) {
            x = rng() % 2 ? 0x80000000u : 0u;
        } else {
            const float f = normal(rng);
            std::memcpy(&x, &f, 4);
        }
    }
    return v;
}

bool sameBits(const Accum &a, const Accum &b)
{
    return a.count == b.count && a.finite == b.finite && a.nan == b.nan && a.posInf == b.posInf &&
           a.negInf == b.negInf && a.denormal == b.denormal &&
           std::memcmp(&a.min, &b.min, 8) == 0 && std::memcmp(&a.max, &b.max, 8) == 0 &&
           std::memcmp(&a.mean, &b.mean, 8) == 0 && std::memcmp(&a.m2, &b.m2, 8) == 0 &&
           std::memcmp(&a.sumSq, &b.sumSq, 8) == 0;
}

template<int Code, int Size>
void compare(const unsigned char *bytes, int64_t n)
{
    for (int64_t begin : {int64_t(0), int64_t(1), int64_t(3), int64_t(5)})
        for (int64_t end = n - 7; end <= n; ++end) {
            const Accum want = foldRange<Code, Size>(bytes, begin, end);
            const Accum got = simd::foldRange<Code, Size>(bytes, begin, end);
            ASSERT_TRUE(sameBits(want, got))
                << "code " << Code << " [" << begin << ", " << end << "): finite " << want.finite
                << "/" << got.finite << ", nan " << want.nan << "/" << got.nan;
            if (!want.finite)
                continue;
            for (double lo : {want.min, want.min * 2}) {
                std::vector<unsigned long long> h1(64), h2(64);
                histogramRange<Code, Size>(bytes, begin, end, lo, want.max, 64, h1.data());
                simd::histogramRange<Code, Size>(bytes, begin, end, lo, want.max, 64, h2.data());
                ASSERT_EQ(h1, h2) << "code " << Code << " [" << begin << ", " << end << ")";
            }
        }
}

} // namespace

TEST(HealthSimd, Float32SameBitsAsTheSharedCode)
{
    // Ranges with no odd element take the vector loop; one anywhere sends it back to the shared
    // code; odd elements only in the tail are counted by the shared tail.
    for (uint32_t odd : {0u, 2u, 5000u})
        for (uint32_t seed : {1u, 2u, 3u}) {
            const auto v = mixedFloat32(4096 + 3, seed, odd);
            compare<kF32, 4>(reinterpret_cast<const unsigned char *>(v.data()), int64_t(v.size()));
        }
    auto v = mixedFloat32(4096 + 3, 9, 0);
    v[4096 + 1] = 0x7fc00000u; // NaN
    v[4096] = 0x00000003u;     // denormal
    compare<kF32, 4>(reinterpret_cast<const unsigned char *>(v.data()), int64_t(v.size()));
}

TEST(HealthSimd, BFloat16SameBitsAsTheSharedCode)
{
    for (uint32_t odd : {0u, 2u, 5000u})
        for (uint32_t seed : {4u, 5u}) {
            const auto wide = mixedFloat32(4096 + 5, seed, odd);
            std::vector<uint16_t> v(wide.size());
            for (size_t i = 0; i < v.size(); ++i)
                v[i] = uint16_t(wide[i] >> 16);
            compare<kBF16, 2>(reinterpret_cast<const unsigned char *>(v.data()), int64_t(v.size()));
        }
}

TEST(HealthSimd, AllEqualValuesFillTheFirstBin)
{
    std::vector<float> v(1001, 0.5f);
    const auto *b = reinterpret_cast<const unsigned char *>(v.data());
    std::vector<unsigned long long> h1(8), h2(8);
    histogramRange<kF32, 4>(b, 0, 1001, 0.5, 0.5, 8, h1.data());
    simd::histogramRange<kF32, 4>(b, 0, 1001, 0.5, 0.5, 8, h2.data());
    EXPECT_EQ(h1, h2);
    EXPECT_EQ(h2[0], 1001u);
}

TEST(HealthSimd, FingerprintSameAsTheSharedCode)
{
    const auto v = mixedFloat32(1001, 7);
    const auto *b = reinterpret_cast<const unsigned char *>(v.data());
    for (int64_t size : {int64_t(4004), int64_t(4003), int64_t(37), int64_t(8), int64_t(0)})
        for (int64_t first : {int64_t(0), int64_t(1), int64_t(3)})
            for (int64_t base : {int64_t(0), int64_t(512)}) {
                const int64_t words = (size + 7) / 8;
                if (first > words)
                    continue;
                EXPECT_EQ(fingerprintWords(b, size, first, words, base),
                          simd::fingerprintWords(b, size, first, words, base))
                    << size << " " << first << " " << base;
            }
}

TEST(HealthSimd, Float16SameBitsAsTheSharedCode)
{
    const uint16_t special[] = {0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x0001, 0x83ff, 0x0200,
                                0x8000, 0x0000, 0x7bff, 0xfbff, 0x0400, 0x8400};
    for (uint32_t oddEvery : {0u, 2u, 5000u})
        for (uint32_t seed : {6u, 7u}) {
            std::mt19937 rng(seed);
            std::vector<uint16_t> v(4096 + 6);
            for (uint16_t &x : v) {
                const uint16_t pick = special[rng() % std::size(special)];
                // normal halves: any exponent 1..30, any mantissa, either sign
                const uint16_t normal =
                    uint16_t((rng() % 2) << 15 | (1 + rng() % 30) << 10 | (rng() % 1024));
                const bool oddOne = oddEvery && rng() % oddEvery == 0;
                x = oddOne ? pick : (rng() % 64 == 0 ? uint16_t(rng() % 2 ? 0x8000 : 0) : normal);
            }
            compare<kF16, 2>(reinterpret_cast<const unsigned char *>(v.data()), int64_t(v.size()));
        }
    // Denormals without NaN or infinities: the vector loop counts them itself.
    std::mt19937 rng(8);
    std::vector<uint16_t> v(4096 + 2);
    for (uint16_t &x : v)
        x = rng() % 50 == 0 ? uint16_t((rng() % 2) << 15 | (1 + rng() % 1023))
                            : uint16_t((rng() % 2) << 15 | (1 + rng() % 30) << 10 | (rng() % 1024));
    compare<kF16, 2>(reinterpret_cast<const unsigned char *>(v.data()), int64_t(v.size()));
}

TEST(HealthSimd, Float8SameBitsAsTheSharedCode)
{
    // Every one of the 256 values of each format (NaN, infinities where the format has them,
    // zeros, denormals, normals of either sign) at every position, then weight-like runs with
    // the odd ones rare or absent.
    std::vector<uint8_t> all(256 * 3 + 5);
    for (size_t i = 0; i < all.size(); ++i)
        all[i] = uint8_t(i * 37 + i / 256);
    compare<kF8E4M3FN, 1>(all.data(), int64_t(all.size()));
    compare<kF8E5M2, 1>(all.data(), int64_t(all.size()));
    for (uint32_t oddEvery : {0u, 3u, 5000u})
        for (uint32_t seed : {8u, 9u}) {
            std::mt19937 rng(seed);
            std::vector<uint8_t> e4(4096 + 7), e5(e4.size());
            for (size_t i = 0; i < e4.size(); ++i) {
                const bool oddOne = oddEvery && rng() % oddEvery == 0;
                const uint8_t sign = uint8_t((rng() % 2) << 7);
                // finite values, denormals and zeros included; the odd ones NaN (and infinity)
                e4[i] = oddOne ? uint8_t(sign | 0x7f) : uint8_t(sign | (rng() % 0x7f));
                e5[i] =
                    oddOne ? uint8_t(sign | 0x7c | (rng() % 4)) : uint8_t(sign | (rng() % 0x7c));
            }
            compare<kF8E4M3FN, 1>(e4.data(), int64_t(e4.size()));
            compare<kF8E5M2, 1>(e5.data(), int64_t(e5.size()));
        }
}
