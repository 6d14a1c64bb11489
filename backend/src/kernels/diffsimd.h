// SPDX-License-Identifier: MIT
// The host's vector path of the value difference for two tensors of one float dtype (float32,
// bfloat16, float16: nearly every pair compared): diffcore.h's diffRange, four lanes at a time in
// GCC's generic vectors, as healthsimd.h does for health. Lane k takes the pairs begin + k,
// begin + k + kLanes, … as the scalar loop does; the tail and the merge are the shared code's, so
// the bits are the same. A segment with a NaN or an infinity on either side goes back to the
// shared code whole (tests/backend/value_diff_test.cpp checks both paths against each other).
#pragma once

#include "diffcore.h"
#include "healthsimd.h"

#ifndef __CUDACC__

namespace shardscope::kernels::simd {

// A float's bits as an integer that orders like its value (±0 both 0), per lane: float32 bits
// as loaded; bfloat16 loaded as the upper half of a float32 (its own order, exactly 2^16 times);
// float16 in the low 16 bits.
template<int Code>
SS_HD_HOT V4l ordered(V4u u)
{
    const uint32_t sign = Code == kF16 ? 0x8000u : 0x80000000u;
    const V4l mag = __builtin_convertvector(u & (sign - 1u), V4l);
    const V4l negative = __builtin_convertvector((u & sign) != 0u, V4l);
    V4l o = negative != 0 ? -mag : mag;
    if constexpr (Code == kBF16)
        o = o / 65536;
    return o;
}

/** One half (lanes 0-3 or 4-7) of the eight lanes' sums and per-lane extremes. */
struct DiffHalf
{
    V4d sumAbs, sumSq, sumA2, sumB2, sumAB, maxAbs, maxRel;
    V4l maxAt, maxUlp;
};

SS_HD_HOT DiffHalf emptyDiffHalf()
{
    DiffHalf h;
    h.sumAbs = V4d{0.0, 0.0, 0.0, 0.0};
    h.sumSq = h.sumAbs;
    h.sumA2 = h.sumAbs;
    h.sumB2 = h.sumAbs;
    h.sumAB = h.sumAbs;
    h.maxAbs = V4d{-1.0, -1.0, -1.0, -1.0}; // any first |a - b| is larger
    h.maxRel = h.sumAbs;
    h.maxAt = V4l{-1, -1, -1, -1};
    h.maxUlp = V4l{0, 0, 0, 0};
    return h;
}

// Four pairs, all finite: the sums, extremes, counts and bins diffOne() makes of them.
template<int Code>
SS_HD_HOT void diffFour(DiffHalf &h, V4u ua, V4u ub, V4l index, const DiffParams &p, V4l &differ,
                        V4l &outside, unsigned long long *hist)
{
    const V4d zero = {0.0, 0.0, 0.0, 0.0}, one = {1.0, 1.0, 1.0, 1.0};
    const V4d a = value<Code>(ua), b = value<Code>(ub);
    differ -= __builtin_convertvector(ua != ub, V4l);
    const V4d d = a - b;
    const V4d ad = d < zero ? -d : d, ab = b < zero ? -b : b;
    const V4d tol = V4d{p.atol, p.atol, p.atol, p.atol} + V4d{p.rtol, p.rtol, p.rtol, p.rtol} * ab;
    outside -= (ad <= tol) == 0;
    h.sumAbs += ad;
    h.sumSq += d * d;
    h.sumA2 += a * a;
    h.sumB2 += b * b;
    h.sumAB += a * b;
    const V4l larger = ad > h.maxAbs;
    h.maxAbs = larger ? ad : h.maxAbs;
    h.maxAt = larger ? index : h.maxAt;
    const V4l lzero = {0, 0, 0, 0};
    const V4d rel = ab > zero ? ad / (ab > zero ? ab : one) : zero;
    h.maxRel = rel > h.maxRel ? rel : h.maxRel;
    if (p.ulpCode >= 0) {
        V4l u = ordered<Code>(ua) - ordered<Code>(ub);
        u = u < lzero ? -u : u;
        h.maxUlp = u > h.maxUlp ? u : h.maxUlp;
    }
    V4l bitsOf;
    memcpy(&bitsOf, &ad, sizeof bitsOf);
    const V4l first = {1, 1, 1, 1},
              last = {kDiffBins - 1, kDiffBins - 1, kDiffBins - 1, kDiffBins - 1};
    V4l bin = ((bitsOf >> 52) & 0x7ff) - 1023 + kDiffBinBias;
    bin = bin < first ? first : bin;
    bin = bin > last ? last : bin;
    bin = ad == zero ? lzero : bin;
    for (int k = 0; k < 4; ++k)
        ++hist[bin[k]];
}

/**
 * diffcore.h's diffRange for two sides of float code `Code` (kF32, kBF16, kF16): the same bits.
 * `hist` is incremented.
 */
template<int Code, int Size>
SS_HD_HOT DiffAccum diffRange(const unsigned char *a, const unsigned char *b, int64_t begin,
                              int64_t end, int64_t base, const DiffParams &p,
                              unsigned long long *hist)
{
    static_assert(kLanes == 8, "two vectors of four lanes");
    DiffHalf lo = emptyDiffHalf(), hi = emptyDiffHalf();
    V4i rare = {0, 0, 0, 0};
    V4l differ = {0, 0, 0, 0}, outside = {0, 0, 0, 0};
    unsigned long long local[kDiffBins] = {};
    int64_t firstDiff = -1;
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const V4u a0 = load4<Code>(a + i * Size), a1 = load4<Code>(a + (i + 4) * Size);
        const V4u b0 = load4<Code>(b + i * Size), b1 = load4<Code>(b + (i + 4) * Size);
        rare |= special<Code>(a0) | special<Code>(a1) | special<Code>(b0) | special<Code>(b1);
        const V4l at = {base + i, base + i + 1, base + i + 2, base + i + 3};
        diffFour<Code>(lo, a0, b0, at, p, differ, outside, local);
        diffFour<Code>(hi, a1, b1, at + 4, p, differ, outside, local);
        if (firstDiff < 0) {
            const V4i ne = (a0 != b0) | (a1 != b1);
            if ((ne[0] | ne[1] | ne[2] | ne[3]) != 0) {
                const V4u as[2] = {a0, a1}, bs[2] = {b0, b1};
                for (int k = 0; k < 8 && firstDiff < 0; ++k)
                    if (as[k / 4][k % 4] != bs[k / 4][k % 4])
                        firstDiff = base + i + k;
            }
        }
    }
    if ((rare[0] | rare[1] | rare[2] | rare[3]) != 0)
        return kernels::diffRange<Code, Size, Code, Size>(a, b, begin, end, base, p, hist);
    // Into the shared code's lanes and accumulator; the tail continues there.
    DiffAccum acc = startDiff(end - begin, p);
    DiffLane lanes[kLanes];
    for (int k = 0; k < 4; ++k) {
        lanes[k] = DiffLane{lo.sumAbs[k], lo.sumSq[k], lo.sumA2[k], lo.sumB2[k], lo.sumAB[k]};
        lanes[k + 4] = DiffLane{hi.sumAbs[k], hi.sumSq[k], hi.sumA2[k], hi.sumB2[k], hi.sumAB[k]};
    }
    for (const DiffHalf *h : {&lo, &hi})
        for (int k = 0; k < 4; ++k) {
            if (h->maxAt[k] >= 0 && (acc.maxAbsAt < 0 || h->maxAbs[k] > acc.maxAbs ||
                                     (h->maxAbs[k] == acc.maxAbs && h->maxAt[k] < acc.maxAbsAt))) {
                acc.maxAbs = h->maxAbs[k];
                acc.maxAbsAt = h->maxAt[k];
            }
            acc.maxRel = h->maxRel[k] > acc.maxRel ? h->maxRel[k] : acc.maxRel;
            if (p.ulpCode >= 0)
                acc.maxUlp = h->maxUlp[k] > acc.maxUlp ? h->maxUlp[k] : acc.maxUlp;
        }
    acc.differing = differ[0] + differ[1] + differ[2] + differ[3];
    acc.outside = outside[0] + outside[1] + outside[2] + outside[3];
    acc.firstDiff = firstDiff;
    for (int k = 0; i < end; ++i, ++k)
        kernels::diffOne<Code, Size, Code, Size>(a + i * Size, b + i * Size, base + i, p, lanes[k],
                                                 acc, local);
    finishLanes(lanes, acc);
    for (int k = 0; k < kDiffBins; ++k)
        hist[k] += local[k];
    return acc;
}

} // namespace shardscope::kernels::simd

#endif
