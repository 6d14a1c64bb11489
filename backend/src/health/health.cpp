// SPDX-License-Identifier: MIT
#include "shardscope/health.h"

#include "health/healthstream.h"
#include "kernels/cpuclones.h"
#include "kernels/healthcore.h"
#include "kernels/healthdevice.h"
#include "kernels/healthsimd.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>

#include <cmath>

namespace shardscope {

namespace {
using namespace kernels;

std::optional<int> elemCode(DType t)
{
    switch (t) {
    case DType::Float64:
        return kF64;
    case DType::Float32:
        return kF32;
    case DType::Float16:
        return kF16;
    case DType::BFloat16:
        return kBF16;
    case DType::Float8E4M3FN:
        return kF8E4M3FN;
    case DType::Float8E5M2:
        return kF8E5M2;
    case DType::Int64:
        return kI64;
    case DType::Int32:
        return kI32;
    case DType::Int16:
        return kI16;
    case DType::Int8:
        return kI8;
    case DType::UInt8:
        return kU8;
    case DType::Bool:
        return kBool;
    case DType::UInt16:
        return kU16;
    case DType::UInt32:
        return kU32;
    case DType::UInt64:
        return kU64;
    default:
        return std::nullopt;
    }
}

// A complex tensor's real and imaginary parts count as elements of their own (as torch's
// view_as_real shows them): its health is that of its parts' dtype over twice the elements.
DType partsDType(DType t)
{
    switch (t) {
    case DType::Complex128:
        return DType::Float64;
    case DType::Complex64:
        return DType::Float32;
    case DType::Complex32:
        return DType::Float16;
    default:
        return t;
    }
}

TensorHealth finish(const Accum &a, std::vector<int64_t> histogram, uint64_t fingerprint)
{
    TensorHealth h;
    h.count = a.count;
    h.finite = a.finite;
    h.nanCount = a.nan;
    h.posInfCount = a.posInf;
    h.negInfCount = a.negInf;
    h.denormalCount = a.denormal;
    h.min = a.min;
    h.max = a.max;
    h.mean = a.mean;
    h.std = a.finite ? std::sqrt(a.m2 / double(a.finite)) : 0.0;
    h.l2 = std::sqrt(a.sumSq);
    h.histogram = std::move(histogram);
    h.fingerprint = fingerprint;
    return h;
}

// The CPU's loops: float32, bfloat16 and float16 through the vector path (also built for AVX2,
// kernels/cpuclones.h), everything else through the shared scalar code.
SS_CPU_CLONES Accum cpuFold(const unsigned char *bytes, int es, int code, int64_t begin,
                            int64_t end)
{
    switch (code) {
    case kF32:
        return simd::foldRange<kF32, 4>(bytes, begin, end);
    case kBF16:
        return simd::foldRange<kBF16, 2>(bytes, begin, end);
    case kF16:
        return simd::foldRange<kF16, 2>(bytes, begin, end);
    case kF8E4M3FN:
        return simd::foldRange<kF8E4M3FN, 1>(bytes, begin, end);
    case kF8E5M2:
        return simd::foldRange<kF8E5M2, 1>(bytes, begin, end);
    default:
        return foldSegment(bytes, es, code, begin, end);
    }
}

SS_CPU_CLONES void cpuHistogram(const unsigned char *bytes, int code, int64_t begin, int64_t end,
                                double lo, double hi, int bins, unsigned long long *hist)
{
    switch (code) {
    case kF32:
        return simd::histogramRange<kF32, 4>(bytes, begin, end, lo, hi, bins, hist);
    case kBF16:
        return simd::histogramRange<kBF16, 2>(bytes, begin, end, lo, hi, bins, hist);
    case kF16:
        return simd::histogramRange<kF16, 2>(bytes, begin, end, lo, hi, bins, hist);
    case kF8E4M3FN:
        return simd::histogramRange<kF8E4M3FN, 1>(bytes, begin, end, lo, hi, bins, hist);
    case kF8E5M2:
        return simd::histogramRange<kF8E5M2, 1>(bytes, begin, end, lo, hi, bins, hist);
    default:
        return histogramSegment(bytes, code, begin, end, lo, hi, bins, hist);
    }
}

SS_CPU_CLONES uint64_t cpuFingerprint(const unsigned char *bytes, int64_t size, int64_t first,
                                      int64_t last, int64_t wordBase = 0)
{
    return simd::fingerprintWords(bytes, size, first, last, wordBase);
}

template<typename F>
void runOn(int threads, F &&f)
{
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
        pool.emplace_back(f, t);
    f(0);
    for (std::thread &th : pool)
        th.join();
}

} // namespace

Result<TensorHealth> computeHealth(const TensorData &data, ComputeDevice device, int bins)
{
    return detail::computeHealthOn(data, device, 0, bins);
}

Result<TensorHealth> detail::computeHealthOn(const TensorData &data, ComputeDevice device,
                                             int threadCount, int bins)
{
    const DType elem = partsDType(data.dtype);
    const auto code = elemCode(elem);
    if (!code)
        return makeError(Error::Code::Unsupported,
                         "no health statistics for " + std::string(dtypeName(data.dtype)));
    if (bins < 1 || bins > kMaxBins)
        return makeError(Error::Code::Limit,
                         "histogram bins must be 1.." + std::to_string(kMaxBins));
    const int es = elementSize(elem);
    const int64_t n = int64_t(data.bytes.size()) / es;
    const auto *bytes = reinterpret_cast<const unsigned char *>(data.bytes.data());
    if (device == ComputeDevice::Cuda) {
        Accum total;
        std::vector<unsigned long long> histogram(size_t(bins), 0);
        unsigned long long fp = 0;
        const char *error = nullptr;
        if (!deviceHealth(bytes, n, es, *code, bins, total, histogram.data(), fp, error))
            return makeError(Error::Code::Unsupported, std::string("CUDA: ") + error);
        TensorHealth h =
            finish(total, std::vector<int64_t>(histogram.begin(), histogram.end()), fp);
        h.device = "cuda:0";
        return h;
    }

    // Segments folded on a few threads into per-segment results, merged here in index order:
    // exactly what the device path does, so both agree bit for bit.
    const int64_t segments = (n + kSegment - 1) / kSegment;
    const int64_t size = int64_t(data.bytes.size()), words = (size + 7) / 8;
    const int64_t wanted =
        threadCount > 0 ? threadCount : std::min<int64_t>(std::thread::hardware_concurrency(), 8);
    const int threads = int(std::clamp<int64_t>(wanted, 1, std::max<int64_t>(segments, 1)));
    std::vector<Accum> parts(static_cast<size_t>(segments));
    auto fold = [&](int t) {
        for (int64_t s = t; s < segments; s += threads)
            parts[size_t(s)] =
                cpuFold(bytes, es, *code, s * kSegment, std::min(n, (s + 1) * kSegment));
    };
    runOn(threads, fold);
    Accum total = emptyAccum();
    for (const Accum &a : parts)
        merge(total, a);
    std::vector<std::vector<unsigned long long>> hists(
        static_cast<size_t>(threads), std::vector<unsigned long long>(static_cast<size_t>(bins)));
    std::vector<uint64_t> fps(size_t(threads), 0);
    // Histogram and fingerprint in one sweep of blocks that stay in cache: a word holds whole
    // elements (1, 2, 4 or 8 bytes), so a block of words is a block of elements.
    auto second = [&](int t) {
        constexpr int64_t kBlockWords = 8192;
        const int64_t w1 = words * (t + 1) / threads;
        for (int64_t w = words * t / threads; w < w1; w += kBlockWords) {
            const int64_t we = std::min(w1, w + kBlockWords);
            cpuHistogram(bytes, *code, w * 8 / es, std::min(n, we * 8 / es), total.min, total.max,
                         bins, hists[size_t(t)].data());
            fps[size_t(t)] += cpuFingerprint(bytes, size, w, we);
        }
    };
    runOn(threads, second);
    std::vector<int64_t> histogram(size_t(bins), 0);
    uint64_t fp = 0;
    for (int t = 0; t < threads; ++t) {
        for (int b = 0; b < bins; ++b)
            histogram[size_t(b)] += int64_t(hists[size_t(t)][size_t(b)]);
        fp += fps[size_t(t)];
    }
    TensorHealth h = finish(total, std::move(histogram), fp);
    h.device = "cpu";
    return h;
}

std::string initialLikeness(const TensorHealth &h, double initStd, int layers)
{
    if (h.count == 0 || h.finite != h.count)
        return {};
    char buf[200];
    if (h.min == h.max && (h.min == 1.0 || h.min == 0.0)) {
        std::snprintf(buf, sizeof buf, "every value is %g: %s", h.min,
                      h.min == 1.0 ? "a norm's initial weight" : "an initial bias (or zeroed)");
        return buf;
    }
    if (h.count < 1024 || initStd <= 0)
        return {}; // too few values to tell a draw from trained weights
    const double n = double(h.count);
    for (const double sigma : {initStd, layers > 0 ? initStd / std::sqrt(2.0 * layers) : 0.0}) {
        if (sigma <= 0)
            continue;
        // Four standard errors of a normal sample's mean and std.
        if (std::fabs(h.mean) <= 4 * sigma / std::sqrt(n) &&
            std::fabs(h.std - sigma) <= 4 * sigma / std::sqrt(2 * n)) {
            std::snprintf(buf, sizeof buf,
                          "mean %.3g and std %.5g are a fresh normal(0, %.5g) draw's, within "
                          "sampling noise (%s)",
                          h.mean, h.std, sigma,
                          sigma == initStd ? "init_method_std" : "output layers' scaled init");
            return buf;
        }
    }
    return {};
}

namespace detail {

using namespace kernels;

std::optional<int> kernelCode(DType t)
{
    return elemCode(partsDType(t));
}

int kernelParts(DType t)
{
    return partsDType(t) == t ? 1 : 2;
}

kernels::Accum foldOnCpu(const unsigned char *bytes, int elemSize, int code, int64_t begin,
                         int64_t end)
{
    return cpuFold(bytes, elemSize, code, begin, end);
}

HealthStream::HealthStream(DType dtype, int bins)
    : m_code(elemCode(partsDType(dtype)).value_or(-1))
    , m_elemSize(elementSize(partsDType(dtype)))
    , m_bins(std::clamp(bins, 1, kMaxBins))
    , m_histogram(size_t(m_bins), 0)
{}

void HealthStream::fold(std::span<const std::byte> window, int64_t first)
{
    (void)first; // windows come in order: segments merge in index order, as computeHealth's
    const auto *bytes = reinterpret_cast<const unsigned char *>(window.data());
    const int64_t n = int64_t(window.size()) / m_elemSize;
    for (int64_t s = 0; s * kSegment < n; ++s)
        merge(m_total,
              cpuFold(bytes, m_elemSize, m_code, s * kSegment, std::min(n, (s + 1) * kSegment)));
}

void HealthStream::count(std::span<const std::byte> window, int64_t first)
{
    const auto *bytes = reinterpret_cast<const unsigned char *>(window.data());
    const int64_t n = int64_t(window.size()) / m_elemSize, size = int64_t(window.size());
    cpuHistogram(bytes, m_code, 0, n, m_total.min, m_total.max, m_bins, m_histogram.data());
    // Windows start on whole words (kSegment elements), so local words are global words shifted.
    m_fingerprint += cpuFingerprint(bytes, size, 0, (size + 7) / 8, first * m_elemSize / 8);
}

TensorHealth HealthStream::finish() const
{
    TensorHealth h = shardscope::finish(
        m_total, std::vector<int64_t>(m_histogram.begin(), m_histogram.end()), m_fingerprint);
    h.device = "cpu";
    return h;
}

} // namespace detail

} // namespace shardscope
