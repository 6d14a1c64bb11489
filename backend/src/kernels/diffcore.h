// SPDX-License-Identifier: MIT
// Value difference of two tensors, element pair by element pair: the per-element logic shared by
// the CPU path and the CUDA kernels (as healthcore.h is for one tensor), so that the CPU tests
// exercise exactly what runs on the GPU. Each segment of kSegment pairs is folded in order, in
// kLanes lanes added up in a fixed order; segments merge in index order; histogram bins and
// counts add as integers. The result is the same bits whatever the split of the work.
#pragma once

#include "healthcore.h"

namespace shardscope::kernels {

/** Difference histogram: bin 0 holds equal pairs; bin k ≥ 1 holds |a − b| in the binade
 *  [2^(k − 41), 2^(k − 40)), the first and last bins open-ended (below 2^-40, 2^22 and above). */
constexpr int kDiffBins = 64;
constexpr int kDiffBinBias = 41;

/** Differences of one range of pairs. Sums and extremes cover the pairs where both are finite. */
struct DiffAccum
{
    int64_t count;     ///< pairs
    int64_t differing; ///< not bit-identical (same dtype) or not equal in value (other dtypes)
    int64_t firstDiff; ///< flat index of the first differing pair; -1: none
    int64_t outside;   ///< beyond the tolerance: !(|a − b| ≤ atol + rtol·|b|)
    int64_t nonfinite; ///< pairs where a side is NaN or infinite (not in the sums)
    int64_t maxUlp;    ///< worst distance in ULPs of the narrower float dtype; -1: not measured
    int64_t maxAbsAt;  ///< flat index of the largest |a − b|; -1: none
    double maxAbs, maxRel, sumAbs, sumSq, sumA2, sumB2, sumAB;
};

SS_HD DiffAccum emptyDiff()
{
    return DiffAccum{0, 0, -1, 0, 0, -1, -1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
}

/** b's merge into a, b covering later pairs than a. */
SS_HD void mergeDiff(DiffAccum &a, const DiffAccum &b)
{
    a.count += b.count;
    a.differing += b.differing;
    if (a.firstDiff < 0)
        a.firstDiff = b.firstDiff;
    a.outside += b.outside;
    a.nonfinite += b.nonfinite;
    a.maxUlp = b.maxUlp > a.maxUlp ? b.maxUlp : a.maxUlp;
    if (b.maxAbsAt >= 0 && (a.maxAbsAt < 0 || b.maxAbs > a.maxAbs)) { // ties: the earlier
        a.maxAbs = b.maxAbs;
        a.maxAbsAt = b.maxAbsAt;
    }
    a.maxRel = b.maxRel > a.maxRel ? b.maxRel : a.maxRel;
    a.sumAbs += b.sumAbs;
    a.sumSq += b.sumSq;
    a.sumA2 += b.sumA2;
    a.sumB2 += b.sumB2;
    a.sumAB += b.sumAB;
}

/** An IEEE float's bits as an integer that orders like the value (±0 both 0). */
SS_HD int64_t orderedBits(uint64_t bits, int width)
{
    const uint64_t sign = uint64_t(1) << (width - 1);
    const uint64_t mag = bits & (sign - 1);
    return (bits & sign) ? -int64_t(mag) : int64_t(mag);
}

/** float32 bits → bfloat16 bits, round to nearest even (NaN kept a NaN). */
SS_HD uint32_t bf16Bits(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/** float32 bits → float16 bits, round to nearest even (overflow to infinity). */
SS_HD uint32_t f16Bits(uint32_t u)
{
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return sign | 0x7e00u;
    if (absu >= 0x477ff000u) // ≥ 65520 rounds to infinity
        return sign | 0x7c00u;
    const int exp = int(absu >> 23) - 127;
    if (exp >= -14) { // normal half
        const uint32_t man = absu & 0x7fffffu;
        uint32_t h = uint32_t(exp + 15) << 10 | (man >> 13);
        const uint32_t rest = man & 0x1fffu;
        h += rest > 0x1000u || (rest == 0x1000u && (h & 1u));
        return sign | h;
    }
    if (exp < -25) // below half the smallest subnormal
        return sign;
    // Subnormal half: the significand (with its implicit bit) shifted into 10 bits.
    const uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    const int shift = -exp - 14 + 13; // 14..24 more bits go
    uint32_t h = man >> shift;
    const uint32_t rest = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
    h += rest > half || (rest == half && (h & 1u));
    return sign | h;
}

/** A finite value's position in the narrower float dtype (code: kF64, kF32, kBF16, kF16). */
SS_HD int64_t ulpPosition(double v, int code)
{
    if (code == kF64)
        return orderedBits(bitCast<uint64_t>(v), 64);
    const uint32_t f = bitCast<uint32_t>(float(v)); // exact: the values came from ≤ 32 bits
    if (code == kF32)
        return orderedBits(f, 32);
    if (code == kBF16)
        return orderedBits(bf16Bits(f), 16);
    return orderedBits(f16Bits(f), 16);
}

/** Bin of a finite |a − b| (> 0): its binary exponent, read from the double's bits. */
SS_HD int diffBin(double d)
{
    const int e = int((bitCast<uint64_t>(d) >> 52) & 0x7ff) - 1023;
    const int b = e + kDiffBinBias;
    return b < 1 ? 1 : (b >= kDiffBins ? kDiffBins - 1 : b);
}

/** Tolerance and what to measure, the same for every range of a tensor pair. */
struct DiffParams
{
    double atol, rtol;
    int ulpCode; ///< the narrower float dtype's code; -1: no ULP measure
    bool sameDtype;
};

/** One lane's sums. */
struct DiffLane
{
    double sumAbs, sumSq, sumA2, sumB2, sumAB;
};

/** One pair, decoded: its counts, sums (into its lane), extremes and histogram bin. */
SS_HD_HOT void diffDecoded(const Decoded &a, const Decoded &b, bool same, int64_t index,
                           const DiffParams &p, DiffLane &l, DiffAccum &acc,
                           unsigned long long *hist)
{
    acc.differing += !same;
    if (!same && acc.firstDiff < 0)
        acc.firstDiff = index;
    if (a.nan || a.inf || b.nan || b.inf) {
        ++acc.nonfinite;
        acc.outside += !same;
        return;
    }
    const double d = a.value - b.value;
    const double ad = d < 0 ? -d : d, ab = b.value < 0 ? -b.value : b.value;
    acc.outside += !(ad <= p.atol + p.rtol * ab);
    l.sumAbs += ad;
    l.sumSq += d * d;
    l.sumA2 += a.value * a.value;
    l.sumB2 += b.value * b.value;
    l.sumAB += a.value * b.value;
    if (ad > acc.maxAbs || acc.maxAbsAt < 0) {
        acc.maxAbs = ad;
        acc.maxAbsAt = index;
    }
    if (ab > 0) {
        const double r = ad / ab;
        acc.maxRel = r > acc.maxRel ? r : acc.maxRel;
    }
    if (p.ulpCode >= 0) {
        const int64_t u = ulpPosition(a.value, p.ulpCode) - ulpPosition(b.value, p.ulpCode);
        const int64_t au = u < 0 ? -u : u;
        acc.maxUlp = au > acc.maxUlp ? au : acc.maxUlp;
    }
    ++hist[ad == 0 ? 0 : diffBin(ad)];
}

/** Whether a pair is identical: bit for bit in one dtype, equal in value across two. */
SS_HD_HOT bool identical(const unsigned char *pa, const unsigned char *pb, int size,
                         const Decoded &a, const Decoded &b, bool sameDtype)
{
    if (!sameDtype)
        return (a.nan && b.nan) || (!a.nan && !b.nan && a.inf == b.inf && a.value == b.value);
    bool same = true;
    for (int k = 0; k < size; ++k)
        same = same && pa[k] == pb[k];
    return same;
}

template<int CA, int SA, int CB, int SB>
SS_HD_HOT void diffOne(const unsigned char *pa, const unsigned char *pb, int64_t index,
                       const DiffParams &p, DiffLane &l, DiffAccum &acc, unsigned long long *hist)
{
    const Decoded a = decode(pa, CA), b = decode(pb, CB);
    diffDecoded(a, b, identical(pa, pb, SA, a, b, p.sameDtype), index, p, l, acc, hist);
}

/** A range's accumulator before its pairs: counts from zero, the ULP measure on or off. */
SS_HD DiffAccum startDiff(int64_t count, const DiffParams &p)
{
    DiffAccum acc = emptyDiff();
    acc.count = count;
    acc.maxUlp = p.ulpCode >= 0 ? 0 : -1;
    return acc;
}

SS_HD void clearLanes(DiffLane *lanes)
{
    for (int k = 0; k < kLanes; ++k)
        lanes[k] = DiffLane{0.0, 0.0, 0.0, 0.0, 0.0};
}

/** The lanes' sums into the accumulator, each field's eight added in sumLanes()'s order. */
SS_HD void finishLanes(const DiffLane *lanes, DiffAccum &acc)
{
    double v[kLanes];
    for (int j = 0; j < kLanes; ++j)
        v[j] = lanes[j].sumAbs;
    acc.sumAbs = sumLanes(v);
    for (int j = 0; j < kLanes; ++j)
        v[j] = lanes[j].sumSq;
    acc.sumSq = sumLanes(v);
    for (int j = 0; j < kLanes; ++j)
        v[j] = lanes[j].sumA2;
    acc.sumA2 = sumLanes(v);
    for (int j = 0; j < kLanes; ++j)
        v[j] = lanes[j].sumB2;
    acc.sumB2 = sumLanes(v);
    for (int j = 0; j < kLanes; ++j)
        v[j] = lanes[j].sumAB;
    acc.sumAB = sumLanes(v);
}

/**
 * Pairs [begin, end) of one segment (at most kSegment), `base` the flat index of pair 0. The
 * sums go to lanes round-robin from `begin` and are added up in a fixed order; `hist` (kDiffBins)
 * is incremented.
 */
template<int CA, int SA, int CB, int SB>
SS_HD DiffAccum diffRange(const unsigned char *a, const unsigned char *b, int64_t begin,
                          int64_t end, int64_t base, const DiffParams &p, unsigned long long *hist)
{
    DiffAccum acc = startDiff(end - begin, p);
    DiffLane lanes[kLanes];
    clearLanes(lanes);
    int k = 0;
    for (int64_t i = begin; i < end; ++i) {
        diffOne<CA, SA, CB, SB>(a + i * SA, b + i * SB, base + i, p, lanes[k], acc, hist);
        k = k + 1 == kLanes ? 0 : k + 1;
    }
    finishLanes(lanes, acc);
    return acc;
}

/** Decodes each side with decode()'s switch: every code pair the float loops do not cover. */
SS_HD DiffAccum diffRangeGeneric(const unsigned char *a, int codeA, int sizeA,
                                 const unsigned char *b, int codeB, int sizeB, int64_t begin,
                                 int64_t end, int64_t base, const DiffParams &p,
                                 unsigned long long *hist)
{
    DiffAccum acc = startDiff(end - begin, p);
    DiffLane lanes[kLanes];
    clearLanes(lanes);
    int k = 0;
    for (int64_t i = begin; i < end; ++i) {
        const unsigned char *pa = a + i * sizeA, *pb = b + i * sizeB;
        const Decoded da = decode(pa, codeA), db = decode(pb, codeB);
        diffDecoded(da, db, identical(pa, pb, sizeA, da, db, p.sameDtype), base + i, p, lanes[k],
                    acc, hist);
        k = k + 1 == kLanes ? 0 : k + 1;
    }
    finishLanes(lanes, acc);
    return acc;
}

// The four float codes get their own loops; any other pair of codes goes through the generic
// one, whose decode() switches per element.
template<int CA, int SA>
SS_HD DiffAccum diffSegmentB(const unsigned char *a, int codeA, const unsigned char *b, int codeB,
                             int sizeB, int64_t begin, int64_t end, int64_t base,
                             const DiffParams &p, unsigned long long *hist)
{
    switch (codeB) {
    case kF64:
        return diffRange<CA, SA, kF64, 8>(a, b, begin, end, base, p, hist);
    case kF32:
        return diffRange<CA, SA, kF32, 4>(a, b, begin, end, base, p, hist);
    case kF16:
        return diffRange<CA, SA, kF16, 2>(a, b, begin, end, base, p, hist);
    case kBF16:
        return diffRange<CA, SA, kBF16, 2>(a, b, begin, end, base, p, hist);
    }
    return diffRangeGeneric(a, codeA, SA, b, codeB, sizeB, begin, end, base, p, hist);
}

/** One segment's pairs [begin, end): the float loops where both codes have one. */
SS_HD DiffAccum diffSegment(const unsigned char *a, int codeA, int sizeA, const unsigned char *b,
                            int codeB, int sizeB, int64_t begin, int64_t end, int64_t base,
                            const DiffParams &p, unsigned long long *hist)
{
    switch (codeA) {
    case kF64:
        return diffSegmentB<kF64, 8>(a, codeA, b, codeB, sizeB, begin, end, base, p, hist);
    case kF32:
        return diffSegmentB<kF32, 4>(a, codeA, b, codeB, sizeB, begin, end, base, p, hist);
    case kF16:
        return diffSegmentB<kF16, 2>(a, codeA, b, codeB, sizeB, begin, end, base, p, hist);
    case kBF16:
        return diffSegmentB<kBF16, 2>(a, codeA, b, codeB, sizeB, begin, end, base, p, hist);
    }
    return diffRangeGeneric(a, codeA, sizeA, b, codeB, sizeB, begin, end, base, p, hist);
}

} // namespace shardscope::kernels
