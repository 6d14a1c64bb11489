// SPDX-License-Identifier: MIT
// The host's vector path for float32, bfloat16, float16 and float8 (e4m3fn, e5m2), the dtypes of
// nearly every checkpoint byte:
// the operations of healthcore.h's foldRange and histogramRange, four lanes at a time in GCC's
// generic vectors (one AVX2 register of doubles, or two SSE2 ones). Lane k takes the elements
// begin + k, begin + k + kLanes, … exactly as the scalar loop does, and the tails and merges are
// the shared code's, so the bits are the same (tests/backend/health_simd_test.cpp checks, elements
// of every class included).
#pragma once

#include "healthcore.h"

#ifndef __CUDACC__

// Every function here is inlined into its caller, so returning vectors by value has no ABI (32-byte
// ones are passed by reference all the same: GCC notes those even with the warning off). GCC
// reports it when the translation unit ends, so this cannot be popped.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace shardscope::kernels::simd {

typedef double V4d __attribute__((vector_size(32)));
typedef int64_t V4l __attribute__((vector_size(32)));
typedef uint32_t V4u __attribute__((vector_size(16)));
typedef int32_t V4i __attribute__((vector_size(16)));
typedef float V4f __attribute__((vector_size(16)));
typedef uint16_t V4h __attribute__((vector_size(8)));

typedef uint8_t V4b __attribute__((vector_size(4)));

constexpr bool handles(int code)
{
    return code == kF32 || code == kBF16 || code == kF16 || code == kF8E4M3FN || code == kF8E5M2;
}

constexpr bool isF8(int code)
{
    return code == kF8E4M3FN || code == kF8E5M2;
}

// Whether denormals are common enough that the fast loop counts them itself: float16 weights of
// |x| < 6.1e-5 put some in nearly every segment, and float8 ones more still.
constexpr bool countsDenormals(int code)
{
    return code == kF16 || isF8(code);
}

// Four elements' bits: float32 as they are, bfloat16 as the upper half of a float32, float16 in
// the low 16 bits, float8 in the low 8.
template<int Code>
SS_HD_HOT V4u load4(const unsigned char *p)
{
    if constexpr (Code == kF32) {
        V4u u;
        memcpy(&u, p, sizeof u);
        return u;
    } else if constexpr (isF8(Code)) {
        V4b b;
        memcpy(&b, p, sizeof b);
        return __builtin_convertvector(b, V4u);
    } else {
        V4h h;
        memcpy(&h, p, sizeof h);
        return Code == kBF16 ? __builtin_convertvector(h, V4u) << 16
                             : __builtin_convertvector(h, V4u);
    }
}

SS_HD_HOT V4d toDouble(V4u u)
{
    V4f f;
    memcpy(&f, &u, sizeof f);
    return __builtin_convertvector(f, V4d);
}

// NaN and infinities as a lane mask (-1 / 0).
template<int Code>
SS_HD_HOT V4i special(V4u u)
{
    if constexpr (Code == kF16)
        return ((u >> 10) & 0x1fu) == 0x1fu;
    else if constexpr (Code == kF8E4M3FN) // no infinities; S.1111.111 is NaN
        return (u & 0x7fu) == 0x7fu;
    else if constexpr (Code == kF8E5M2) // float16's upper byte
        return (u & 0x7cu) == 0x7cu;
    else
        return ((u >> 23) & 0xffu) == 0xffu;
}

// What sends a segment back to the shared code, as a lane mask: NaN and infinities, and for
// float32 and bfloat16 denormals too (float32 bits: |u| - 1, a zero wrapping to -1, below the
// smallest normal's, or at least the infinities'), which never occur in real weights there. In
// float16 they do (|x| < 6.1e-5: some in nearly every segment of weights), so the fast loop
// counts those itself.
template<int Code>
SS_HD_HOT V4i odd(V4u u)
{
    if constexpr (countsDenormals(Code)) {
        return special<Code>(u);
    } else {
        const V4i t = V4i(u & 0x7fffffffu) - 1;
        return ((t >= 0) & (t < 0x7fffff)) | (t >= 0x7f7fffff);
    }
}

// Denormals as a lane mask (the dtypes that count them in the fast loop).
template<int Code>
SS_HD_HOT V4i denormals(V4u u)
{
    if constexpr (Code == kF16)
        return ((u & 0x7c00u) == 0u) & ((u & 0x3ffu) != 0u);
    else if constexpr (Code == kF8E4M3FN)
        return ((u & 0x78u) == 0u) & ((u & 0x7u) != 0u);
    else
        return ((u & 0x7cu) == 0u) & ((u & 0x3u) != 0u);
}

// A small float's exact value, as float16 and float8 e4m3fn have it: a normal one is the same
// value as a float32 with its exponent rebiased (+ rebias) and its mantissa widened
// (<< manShift); zero and denormal are man · denormalScale, exact in a float32 too.
SS_HD_HOT V4d smallFloat(V4u sign32, V4u exp, V4u man, uint32_t rebias, int manShift,
                         float denormalScale)
{
    const V4u normal = sign32 | ((exp + rebias) << 23) | (man << manShift);
    V4f small = __builtin_convertvector(V4i(man), V4f) * denormalScale;
    small = sign32 != 0u ? -small : small;
    V4u smallBits;
    memcpy(&smallBits, &small, sizeof smallBits);
    return toDouble(exp == 0u ? smallBits : normal);
}

// The exact value of every lane that is not special (what decode() gives); anything there.
template<int Code>
SS_HD_HOT V4d value(V4u u)
{
    if constexpr (Code == kF16) // bias 15 -> 127, denormals man · 2^-24
        return smallFloat((u & 0x8000u) << 16, (u >> 10) & 0x1fu, u & 0x3ffu, 112u, 13, 0x1p-24f);
    else if constexpr (Code == kF8E5M2)
        return value<kF16>(u << 8);       // the upper byte of a float16, bit for bit
    else if constexpr (Code == kF8E4M3FN) // bias 7 -> 127, denormals man · 2^-9
        return smallFloat((u & 0x80u) << 24, (u >> 3) & 0xfu, u & 0x7u, 120u, 20, 0x1p-9f);
    else
        return toDouble(u);
}

// Lanes 0-3 and 4-7 of the shared code's eight, as two vectors each.
struct Half
{
    V4d sum, sq, lo, hi;
};

SS_HD_HOT Half emptyHalf()
{
    const double inf = __builtin_huge_val();
    Half h;
    h.sum = V4d{0.0, 0.0, 0.0, 0.0};
    h.sq = h.sum;
    h.lo = V4d{inf, inf, inf, inf};
    h.hi = -h.lo;
    return h;
}

SS_HD_HOT void foldFour(Half &h, const V4d &v)
{
    h.sum += v;
    h.sq += v * v;
    h.lo = v < h.lo ? v : h.lo;
    h.hi = v > h.hi ? v : h.hi;
}

// A segment of nothing but finite normal values (and zeros) takes the fast loop below: no masks,
// no counts but the elements'. One that holds a NaN, an infinity or a denormal anywhere is folded
// again by the shared scalar code, which counts them; either way the bits are the scalar code's.
template<int Code, int Size>
SS_HD_HOT Accum foldRange(const unsigned char *bytes, int64_t begin, int64_t end)
{
    static_assert(kLanes == 8, "two vectors of four lanes");
    Half a = emptyHalf(), b = emptyHalf();
    V4i rare = {0, 0, 0, 0}, denormalCount = {0, 0, 0, 0};
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const V4u ua = load4<Code>(bytes + i * Size), ub = load4<Code>(bytes + (i + 4) * Size);
        rare |= odd<Code>(ua) | odd<Code>(ub);
        if constexpr (countsDenormals(Code))
            denormalCount -= denormals<Code>(ua) + denormals<Code>(ub);
        foldFour(a, value<Code>(ua));
        foldFour(b, value<Code>(ub));
    }
    if ((rare[0] | rare[1] | rare[2] | rare[3]) != 0)
        return kernels::foldRange<Code, Size>(bytes, begin, end);
    FoldLanes f = emptyLanes();
    for (int k = 0; k < 4; ++k) {
        f.l[k] = Lane{a.sum[k], a.sq[k], a.lo[k], a.hi[k]};
        f.l[k + 4] = Lane{b.sum[k], b.sq[k], b.lo[k], b.hi[k]};
    }
    f.c.finite = i - begin;
    f.c.denormal = denormalCount[0] + denormalCount[1] + denormalCount[2] + denormalCount[3];
    foldTail<Code, Size>(bytes, i, end, f); // counts its own odd elements, if any
    Accum acc = firstPass(f, end - begin);
    if (acc.finite == 0)
        return acc;
    const V4d mean = {acc.mean, acc.mean, acc.mean, acc.mean};
    V4d ma = {0.0, 0.0, 0.0, 0.0}, mb = ma;
    for (i = begin; i + 8 <= end; i += 8) {
        const V4d da = value<Code>(load4<Code>(bytes + i * Size)) - mean;
        const V4d db = value<Code>(load4<Code>(bytes + (i + 4) * Size)) - mean;
        ma += da * da;
        mb += db * db;
    }
    double lanes[8] = {ma[0], ma[1], ma[2], ma[3], mb[0], mb[1], mb[2], mb[3]};
    deviationTail<Code, Size>(bytes, i, end, acc.mean, lanes);
    acc.m2 = sumLanes(lanes);
    return acc;
}

// Bins of four elements at once (binOf's expression, in the same order); the counting itself
// goes to four sub-histograms, so that equal bins in a row do not wait on each other.
template<int Code, int Size>
SS_HD_HOT void histogramRange(const unsigned char *bytes, int64_t begin, int64_t end, double lo,
                              double hi, int bins, unsigned long long *hist)
{
    unsigned long long sub[4][kMaxBins + 1] = {}; // the last slot takes NaN and Inf
    const double scale = binScale(lo, hi, bins);
    const V4d vlo = {lo, lo, lo, lo}, vscale = {scale, scale, scale, scale};
    const V4i top = {bins - 1, bins - 1, bins - 1, bins - 1}, none = {bins, bins, bins, bins};
    int64_t i = begin;
    for (; i + 4 <= end; i += 4) {
        const V4u u = load4<Code>(bytes + i * Size);
        const V4i skip = special<Code>(u);
        const V4l finite64 = __builtin_convertvector(~skip, V4l);
        const V4d t = V4d(V4l((value<Code>(u) - vlo) * vscale) & finite64);
        V4i b = __builtin_convertvector(t, V4i);
        b = b < 0 ? V4i{0, 0, 0, 0} : b;
        b = b > top ? top : b;
        b = skip ? none : b;
        ++sub[0][b[0]];
        ++sub[1][b[1]];
        ++sub[2][b[2]];
        ++sub[3][b[3]];
    }
    kernels::histogramRange<Code, Size>(bytes, i, end, lo, hi, bins, hist);
    for (int k = 0; k < bins; ++k)
        hist[k] += sub[0][k] + sub[1][k] + sub[2][k] + sub[3][k];
}

typedef uint64_t V4q __attribute__((vector_size(32)));

SS_HD_HOT V4q splitmix64(const V4q &in)
{
    V4q x = in + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// fingerprintWords(), four whole words at a time (integer arithmetic: any order, same sum).
SS_HD_HOT uint64_t fingerprintWords(const unsigned char *bytes, int64_t size, int64_t firstWord,
                                    int64_t lastWord, int64_t wordBase = 0)
{
    constexpr uint64_t kPhi = 0x9E3779B97F4A7C15ull;
    const int64_t whole = lastWord < size / 8 ? lastWord : size / 8;
    const uint64_t p0 = uint64_t(firstWord + wordBase) * kPhi;
    V4q position = {p0, p0 + kPhi, p0 + 2 * kPhi, p0 + 3 * kPhi}, sum = {0, 0, 0, 0};
    int64_t w = firstWord;
    for (; w + 4 <= whole; w += 4, position += 4 * kPhi) {
        V4q v;
        memcpy(&v, bytes + w * 8, sizeof v);
        sum += splitmix64(v + position);
    }
    return sum[0] + sum[1] + sum[2] + sum[3] +
           kernels::fingerprintWords(bytes, size, w, lastWord, wordBase);
}

} // namespace shardscope::kernels::simd

#endif
