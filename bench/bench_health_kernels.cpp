// SPDX-License-Identifier: MIT
// The health loops on one core, ns per element: the shared scalar code (what the device runs)
// against the host's vector path (backend/src/kernels/healthsimd.h), float32, bfloat16 and float16,
// best of 5.
//   build/bench/bench_health_kernels [MEGA_ELEMENTS]   (default 64)
#include "healthsimd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace shardscope::kernels;

namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SS_BENCH_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SS_BENCH_CLONES
#endif

template<int Code, int Size>
SS_BENCH_CLONES Accum fold(const unsigned char *b, int64_t n, bool vector)
{
    Accum t = emptyAccum();
    for (int64_t s = 0; s < n; s += kSegment) {
        const int64_t e = std::min(n, s + kSegment);
        merge(t, vector ? simd::foldRange<Code, Size>(b, s, e) : foldRange<Code, Size>(b, s, e));
    }
    return t;
}

template<int Code, int Size>
SS_BENCH_CLONES void histogram(const unsigned char *b, int64_t n, double lo, double hi,
                               unsigned long long *h, bool vector)
{
    for (int64_t s = 0; s < n; s += 16384) {
        const int64_t e = std::min(n, s + 16384);
        vector ? simd::histogramRange<Code, Size>(b, s, e, lo, hi, 64, h)
               : histogramRange<Code, Size>(b, s, e, lo, hi, 64, h);
    }
}

SS_BENCH_CLONES uint64_t fingerprint(const unsigned char *b, int64_t size, bool vector)
{
    return vector ? simd::fingerprintWords(b, size, 0, (size + 7) / 8)
                  : fingerprintWords(b, size, 0, (size + 7) / 8);
}

template<typename F>
double best(int64_t n, F &&f)
{
    double t = 1e30;
    for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t = std::min(t,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return t * 1e9 / double(n);
}

template<int Code, int Size>
void run(const char *name, const std::vector<unsigned char> &bytes)
{
    const int64_t n = int64_t(bytes.size()) / Size;
    const unsigned char *b = bytes.data();
    const Accum a = fold<Code, Size>(b, n, false);
    std::vector<unsigned long long> h(64);
    volatile uint64_t sink = 0;
    double ns[2][3];
    for (int v = 0; v < 2; ++v) {
        ns[v][0] = best(n, [&] { sink = sink + uint64_t(fold<Code, Size>(b, n, v).finite); });
        ns[v][1] = best(n, [&] { histogram<Code, Size>(b, n, a.min, a.max, h.data(), v); });
        ns[v][2] = best(n, [&] { sink = sink + fingerprint(b, int64_t(bytes.size()), v); });
    }
    std::printf("%-9s fold %.2f -> %.2f ns (%.1fx)  histogram %.2f -> %.2f ns (%.1fx)  "
                "fingerprint %.2f -> %.2f ns (%.1fx)\n",
                name, ns[0][0], ns[1][0], ns[0][0] / ns[1][0], ns[0][1], ns[1][1],
                ns[0][1] / ns[1][1], ns[0][2], ns[1][2], ns[0][2] / ns[1][2]);
}

} // namespace

int main(int argc, char **argv)
{
    const int64_t n = (argc > 1 ? std::atoll(argv[1]) : 64) << 20;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> f32(static_cast<size_t>(n));
    for (float &x : f32)
        x = normal(rng);
    std::vector<unsigned char> bytes(static_cast<size_t>(n) * 4);
    std::memcpy(bytes.data(), f32.data(), bytes.size());
    std::printf("%lld Mi elements, one core, scalar (shared) -> vector, best of 5\n",
                static_cast<long long>(n >> 20));
    run<kF32, 4>("float32", bytes);
    std::vector<unsigned char> bf(static_cast<size_t>(n) * 2);
    for (int64_t i = 0; i < n; ++i) // the upper halves: bfloat16 by truncation
        std::memcpy(bf.data() + i * 2, bytes.data() + i * 4 + 2, 2);
    run<kBF16, 2>("bfloat16", bf);
    std::vector<unsigned char> half(static_cast<size_t>(n) * 2);
    for (int64_t i = 0; i < n; ++i) { // |x| < 6.1e-5 becomes a denormal, as in real weights
        const _Float16 h = static_cast<_Float16>(f32[size_t(i)]);
        std::memcpy(half.data() + i * 2, &h, 2);
    }
    run<kF16, 2>("float16", half);
    // float8 e4m3fn as block-scaled checkpoints store weights: the values scaled to ~N(0, 1)
    // (amax near the format's 448 only in the tails), rounded to the nearest code.
    std::vector<std::pair<double, unsigned char>> codes; // the non-negative finite ones
    for (int c = 0; c < 0x7f; ++c) {
        const unsigned char byte = static_cast<unsigned char>(c);
        codes.emplace_back(decode(&byte, kF8E4M3FN).value, byte);
    }
    std::vector<unsigned char> f8(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const double x = std::abs(double(f32[size_t(i)]) / 0.02);
        auto it = std::lower_bound(codes.begin(), codes.end(), std::pair(x, (unsigned char)0));
        if (it == codes.end() || (it != codes.begin() && x - (it - 1)->first < it->first - x))
            --it;
        f8[size_t(i)] = static_cast<unsigned char>(it->second | (f32[size_t(i)] < 0 ? 0x80 : 0));
    }
    run<kF8E4M3FN, 1>("f8e4m3fn", f8);
}
