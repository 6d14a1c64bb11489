// SPDX-License-Identifier: MIT
// Tensor health (statistics, histogram, fingerprint): the per-element logic shared by the CPU
// path and the CUDA kernels, so that the CPU tests exercise exactly what runs on the GPU. Plain
// C++17 with no library calls beyond <cstdint>/<cmath> builtins, callable from device code.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define SS_HD __host__ __device__ inline
#define SS_HD_HOT __host__ __device__ __forceinline__
#else
#define SS_HD inline
#define SS_HD_HOT inline __attribute__((always_inline))
#endif

namespace shardscope::kernels {

/** Element codes (a device-friendly mirror of DType for the decodable real types). */
enum ElemCode : int {
    kF64,
    kF32,
    kF16,
    kBF16,
    kF8E4M3FN,
    kF8E5M2,
    kI64,
    kI32,
    kI16,
    kI8,
    kU8,
    kBool,
    kU16,
    kU32,
    kU64,
};

/** Elements per segment: each segment is folded sequentially, segments merge in index order. */
constexpr int64_t kSegment = 4096;
constexpr int kMaxBins = 256;

template<typename To, typename From>
SS_HD To bitCast(const From &f)
{
    To t;
    memcpy(&t, &f, sizeof(To));
    return t;
}

struct Decoded
{
    double value;
    bool nan, inf, denormal;
};

SS_HD double ldexpExact(double m, int e)
{
    // m * 2^e without libm (device and host agree bit for bit; e within double range here).
    while (e > 0) {
        m *= 2.0;
        --e;
    }
    while (e < 0) {
        m *= 0.5;
        ++e;
    }
    return m;
}

// A small IEEE-like float: sign, `eb` exponent bits (bias), `mb` mantissa bits.
SS_HD Decoded decodeMinifloat(uint32_t bits, int eb, int mb, int bias, bool ieeeInf, bool e4m3fn)
{
    const uint32_t sign = (bits >> (eb + mb)) & 1u;
    const uint32_t exp = (bits >> mb) & ((1u << eb) - 1u);
    const uint32_t man = bits & ((1u << mb) - 1u);
    Decoded d{0.0, false, false, false};
    const uint32_t expMax = (1u << eb) - 1u;
    if (e4m3fn) { // float8_e4m3fn: no infinities; S.1111.111 is NaN
        if (exp == expMax && man == (1u << mb) - 1u) {
            d.nan = true;
            return d;
        }
    } else if (ieeeInf && exp == expMax) {
        if (man) {
            d.nan = true;
        } else {
            d.inf = true;
            d.value = sign ? -1.0 : 1.0;
        }
        return d;
    }
    double v;
    if (exp == 0) {
        v = ldexpExact(double(man), 1 - bias - mb);
        d.denormal = man != 0;
    } else {
        v = ldexpExact(double(man | (1u << mb)), int(exp) - bias - mb);
    }
    d.value = sign ? -v : v;
    return d;
}

SS_HD Decoded decodeFloat32(uint32_t u)
{
    // Branch-free: the host's vector path (healthsimd.h) computes exactly these selects.
    const uint32_t exp = (u >> 23) & 0xff, man = u & 0x7fffff;
    const bool special = exp == 0xff;
    Decoded d;
    d.nan = special && man != 0;
    d.inf = special && man == 0;
    d.denormal = exp == 0 && man != 0;
    d.value = special ? ((u >> 31) ? -1.0 : 1.0) : double(bitCast<float>(u));
    return d;
}

SS_HD Decoded decode(const unsigned char *p, int code)
{
    Decoded d{0.0, false, false, false};
    switch (code) {
    case kF64: {
        uint64_t u = 0;
        for (int i = 7; i >= 0; --i)
            u = (u << 8) | p[i];
        const uint64_t exp = (u >> 52) & 0x7ff, man = u & ((uint64_t(1) << 52) - 1);
        if (exp == 0x7ff) {
            d.nan = man != 0;
            d.inf = man == 0;
            d.value = (u >> 63) ? -1.0 : 1.0;
            return d;
        }
        d.denormal = exp == 0 && man != 0;
        d.value = bitCast<double>(u);
        return d;
    }
    case kF32:
        return decodeFloat32(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                             uint32_t(p[3]) << 24);
    case kF16:
        return decodeMinifloat(uint32_t(p[0]) | uint32_t(p[1]) << 8, 5, 10, 15, true, false);
    case kBF16: // the upper half of a float32
        return decodeFloat32((uint32_t(p[0]) | uint32_t(p[1]) << 8) << 16);
    case kF8E4M3FN:
        return decodeMinifloat(p[0], 4, 3, 7, false, true);
    case kF8E5M2:
        return decodeMinifloat(p[0], 5, 2, 15, true, false);
    case kI64: {
        uint64_t u = 0;
        for (int i = 7; i >= 0; --i)
            u = (u << 8) | p[i];
        d.value = double(int64_t(u));
        return d;
    }
    case kI32:
        d.value = double(int32_t(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                                 uint32_t(p[3]) << 24));
        return d;
    case kI16:
        d.value = double(int16_t(uint16_t(p[0] | p[1] << 8)));
        return d;
    case kI8:
        d.value = double(int8_t(p[0]));
        return d;
    case kU8:
        d.value = double(p[0]);
        return d;
    case kBool:
        d.value = p[0] ? 1.0 : 0.0;
        return d;
    case kU16:
        d.value = double(uint16_t(p[0] | p[1] << 8));
        return d;
    case kU32:
        d.value = double(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                         uint32_t(p[3]) << 24);
        return d;
    case kU64: {
        uint64_t u = 0;
        for (int i = 7; i >= 0; --i)
            u = (u << 8) | p[i];
        d.value = double(u);
        return d;
    }
    }
    d.nan = true;
    return d;
}

/** Moments and counts of one segment (Chan et al.'s mergeable mean / M2). */
struct Accum
{
    int64_t count, finite, nan, posInf, negInf, denormal;
    double min, max, mean, m2, sumSq;
};

SS_HD Accum emptyAccum()
{
    return Accum{0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0};
}

SS_HD void merge(Accum &a, const Accum &b)
{
    if (b.finite) {
        if (a.finite == 0) {
            a.min = b.min;
            a.max = b.max;
            a.mean = b.mean;
            a.m2 = b.m2;
        } else {
            a.min = b.min < a.min ? b.min : a.min;
            a.max = b.max > a.max ? b.max : a.max;
            const double n = double(a.finite + b.finite);
            const double delta = b.mean - a.mean;
            a.mean += delta * double(b.finite) / n;
            a.m2 += b.m2 + delta * delta * double(a.finite) * double(b.finite) / n;
        }
        a.sumSq += b.sumSq;
    }
    a.count += b.count;
    a.finite += b.finite;
    a.nan += b.nan;
    a.posInf += b.posInf;
    a.negInf += b.negInf;
    a.denormal += b.denormal;
}

/** Bins per unit of value over [lo, hi]; 0 when hi == lo (every value then falls in bin 0). */
SS_HD double binScale(double lo, double hi, int bins)
{
    return hi > lo ? double(bins) / (hi - lo) : 0.0;
}

/** Histogram bin of a finite value over [lo, hi] (the last bin is closed); scale = binScale(). */
SS_HD int binOf(double x, double lo, double scale, int bins)
{
    // One multiply, not a division per element (tools/oracle.py evaluates the same expression).
    int b = int((x - lo) * scale);
    return b < 0 ? 0 : (b >= bins ? bins - 1 : b);
}

// The element loops, instantiated per element code so that decode()'s switch folds away.
// One lane of foldRange: sums and extremes of the finite values it sees.
struct Lane
{
    double sum, sq, lo, hi;
};
struct Counts
{
    int64_t finite, nan, posInf, negInf, denormal;
};

template<int Code, int Size>
SS_HD_HOT void foldOne(const unsigned char *p, Lane &l, Counts &c)
{
    const Decoded d = decode(p, Code);
    const bool fin = !d.nan && !d.inf;
    c.nan += d.nan;
    c.posInf += d.inf && d.value > 0;
    c.negInf += d.inf && d.value < 0;
    c.denormal += d.denormal;
    c.finite += fin;
    const double v = fin ? d.value : 0.0;
    l.sum += v;
    l.sq += v * v;
    l.lo = fin && d.value < l.lo ? d.value : l.lo;
    l.hi = fin && d.value > l.hi ? d.value : l.hi;
}

template<int Code, int Size>
SS_HD_HOT double deviation(const unsigned char *p, double mean)
{
    const Decoded d = decode(p, Code);
    const double dx = !d.nan && !d.inf ? d.value - mean : 0.0;
    return dx * dx;
}

/** Lanes of a fold: element begin + i goes to lane i % kLanes. */
constexpr int kLanes = 8;

/** The lanes of a fold and its counts, between the loop over elements and the merge. */
struct FoldLanes
{
    Lane l[kLanes];
    Counts c;
};

SS_HD FoldLanes emptyLanes()
{
    const double inf = __builtin_huge_val();
    FoldLanes f;
    for (int k = 0; k < kLanes; ++k)
        f.l[k] = Lane{0.0, 0.0, inf, -inf};
    f.c = Counts{0, 0, 0, 0, 0};
    return f;
}

// The elements after the last whole group of kLanes go to lanes 0, 1, … in turn.
template<int Code, int Size>
SS_HD void foldTail(const unsigned char *bytes, int64_t i, int64_t end, FoldLanes &f)
{
    for (int k = 0; i < end; ++i, ++k)
        foldOne<Code, Size>(bytes + i * Size, f.l[k], f.c);
}

SS_HD double minOf(double a, double b)
{
    return b < a ? b : a;
}
SS_HD double maxOf(double a, double b)
{
    return b > a ? b : a;
}
/** Eight lanes added as a balanced tree, always in this order. */
SS_HD double sumLanes(const double *v)
{
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/** Counts, extremes, sum of squares and mean of the lanes, in a fixed order. */
SS_HD Accum firstPass(const FoldLanes &f, int64_t count)
{
    Accum a = emptyAccum();
    a.count = count;
    a.nan = f.c.nan;
    a.posInf = f.c.posInf;
    a.negInf = f.c.negInf;
    a.denormal = f.c.denormal;
    a.finite = f.c.finite;
    if (f.c.finite == 0)
        return a;
    double lo[kLanes], hi[kLanes], sum[kLanes], sq[kLanes];
    for (int k = 0; k < kLanes; ++k) {
        lo[k] = f.l[k].lo;
        hi[k] = f.l[k].hi;
        sum[k] = f.l[k].sum;
        sq[k] = f.l[k].sq;
    }
    a.min = minOf(minOf(minOf(lo[0], lo[1]), minOf(lo[2], lo[3])),
                  minOf(minOf(lo[4], lo[5]), minOf(lo[6], lo[7])));
    a.max = maxOf(maxOf(maxOf(hi[0], hi[1]), maxOf(hi[2], hi[3])),
                  maxOf(maxOf(hi[4], hi[5]), maxOf(hi[6], hi[7])));
    a.sumSq = sumLanes(sq);
    a.mean = sumLanes(sum) / double(f.c.finite);
    return a;
}

template<int Code, int Size>
SS_HD void deviationTail(const unsigned char *bytes, int64_t i, int64_t end, double mean, double *m)
{
    for (int k = 0; i < end; ++i, ++k)
        m[k] += deviation<Code, Size>(bytes + i * Size, mean);
}

// Two passes over the range (at most one segment, still in cache): counts, extremes and sums
// first, then the squared deviations from the mean. Welford's division per element made this
// the slowest loop of a verification. Eight lanes in registers, elements dealt round-robin from
// `begin` and added up in a fixed order, keep the additions from waiting on each other; no
// branches; the device runs this same code and gets the same bits (and the host's vector path,
// healthsimd.h, does the same operations, two vectors of four lanes at a time).
template<int Code, int Size>
SS_HD Accum foldRange(const unsigned char *bytes, int64_t begin, int64_t end)
{
    FoldLanes f = emptyLanes();
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
        for (int k = 0; k < kLanes; ++k)
            foldOne<Code, Size>(bytes + (i + k) * Size, f.l[k], f.c);
    foldTail<Code, Size>(bytes, i, end, f);
    Accum a = firstPass(f, end - begin);
    if (a.finite == 0)
        return a;
    double m[kLanes] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (i = begin; i + kLanes <= end; i += kLanes)
        for (int k = 0; k < kLanes; ++k)
            m[k] += deviation<Code, Size>(bytes + (i + k) * Size, a.mean);
    deviationTail<Code, Size>(bytes, i, end, a.mean, m);
    a.m2 = sumLanes(m);
    return a;
}

template<int Code, int Size>
SS_HD void histogramRange(const unsigned char *bytes, int64_t begin, int64_t end, double lo,
                          double hi, int bins, unsigned long long *hist)
{
    const double scale = binScale(lo, hi, bins);
    for (int64_t i = begin; i < end; ++i) {
        const Decoded d = decode(bytes + i * Size, Code);
        if (!d.nan && !d.inf)
            ++hist[binOf(d.value, lo, scale, bins)];
    }
}

// Calls f.template operator()<Code, Size>() for the element code (X-macro style dispatch).
#define SS_HEALTH_DISPATCH(code, CALL)                                                             \
    switch (code) {                                                                                \
    case kF64:                                                                                     \
        CALL(kF64, 8);                                                                             \
    case kF32:                                                                                     \
        CALL(kF32, 4);                                                                             \
    case kF16:                                                                                     \
        CALL(kF16, 2);                                                                             \
    case kBF16:                                                                                    \
        CALL(kBF16, 2);                                                                            \
    case kF8E4M3FN:                                                                                \
        CALL(kF8E4M3FN, 1);                                                                        \
    case kF8E5M2:                                                                                  \
        CALL(kF8E5M2, 1);                                                                          \
    case kI64:                                                                                     \
        CALL(kI64, 8);                                                                             \
    case kI32:                                                                                     \
        CALL(kI32, 4);                                                                             \
    case kI16:                                                                                     \
        CALL(kI16, 2);                                                                             \
    case kI8:                                                                                      \
        CALL(kI8, 1);                                                                              \
    case kU8:                                                                                      \
        CALL(kU8, 1);                                                                              \
    case kBool:                                                                                    \
        CALL(kBool, 1);                                                                            \
    case kU16:                                                                                     \
        CALL(kU16, 2);                                                                             \
    case kU32:                                                                                     \
        CALL(kU32, 4);                                                                             \
    case kU64:                                                                                     \
        CALL(kU64, 8);                                                                             \
    }

/** Folds elements [begin, end) of one segment, in order. */
SS_HD Accum foldSegment(const unsigned char *bytes, int elemSize, int code, int64_t begin,
                        int64_t end)
{
    (void)elemSize;
#define SS_FOLD(C, S) return foldRange<C, S>(bytes, begin, end)
    SS_HEALTH_DISPATCH(code, SS_FOLD)
#undef SS_FOLD
    return emptyAccum();
}

/** Counts the finite elements of [begin, end) into `hist` (bins over [lo, hi]). */
SS_HD void histogramSegment(const unsigned char *bytes, int code, int64_t begin, int64_t end,
                            double lo, double hi, int bins, unsigned long long *hist){
#define SS_HIST(C, S) return histogramRange<C, S>(bytes, begin, end, lo, hi, bins, hist)
    SS_HEALTH_DISPATCH(code, SS_HIST)
#undef SS_HIST
}

SS_HD uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/**
 * Fingerprint: the wrapping sum over 8-byte little-endian words w_i (the tail zero-padded) of
 * splitmix64(w_i + i·φ), φ = 0x9E3779B97F4A7C15. Order-free to combine, so any split of the work
 * gives the same value, and it still depends on every byte's position. (Two multiplies a word:
 * it runs over every byte verified.)
 */
SS_HD uint64_t fingerprintWords(const unsigned char *bytes, int64_t size, int64_t firstWord,
                                int64_t lastWord, int64_t wordBase = 0)
{
    // wordBase: where `bytes` starts in the whole tensor, in words (a window of it).
    constexpr uint64_t kPhi = 0x9E3779B97F4A7C15ull;
    uint64_t sum = 0, position = uint64_t(firstWord + wordBase) * kPhi;
    for (int64_t w = firstWord; w < lastWord; ++w, position += kPhi) {
        uint64_t v = 0;
        if (w * 8 + 8 <= size) {
            memcpy(&v, bytes + w * 8, 8); // little-endian hosts and devices
        } else {
            for (int k = 7; k >= 0; --k) {
                const int64_t at = w * 8 + k;
                v = (v << 8) | (at < size ? bytes[at] : 0u);
            }
        }
        sum += splitmix64(v + position);
    }
    return sum;
}

} // namespace shardscope::kernels
