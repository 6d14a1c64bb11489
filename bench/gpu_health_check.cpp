// SPDX-License-Identifier: MIT
// Standalone GPU check (no libtorch, so it can be carried to a bare GPU machine): the CUDA health
// kernels must agree bit for bit with the CPU path on random data of every health dtype and of
// awkward sizes, then the kernels' throughput is measured. Prints one JSON line per check and
// exits 1 on any disagreement, 2 without a CUDA device.
//   gpu_health_check [MiB for the throughput run, default 1024]
#include "diffdevice.h"

#include <shardscope/devices.h>
#include <shardscope/health.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

using namespace shardscope;

namespace {

bool same(const TensorHealth &a, const TensorHealth &b)
{
    return a.count == b.count && a.finite == b.finite && a.nanCount == b.nanCount &&
           a.posInfCount == b.posInfCount && a.negInfCount == b.negInfCount &&
           a.denormalCount == b.denormalCount && !std::memcmp(&a.min, &b.min, 8) &&
           !std::memcmp(&a.max, &b.max, 8) && !std::memcmp(&a.mean, &b.mean, 8) &&
           !std::memcmp(&a.std, &b.std, 8) && !std::memcmp(&a.l2, &b.l2, 8) &&
           a.histogram == b.histogram && a.fingerprint == b.fingerprint;
}

TensorData randomData(DType t, int64_t n, uint64_t seed)
{
    TensorData d;
    d.dtype = t;
    d.shape = {n};
    d.bytes.resize(size_t(n * elementSize(t)));
    std::mt19937_64 g(seed);
    for (size_t i = 0; i < d.bytes.size(); i += 8) {
        const uint64_t v = g();
        std::memcpy(d.bytes.data() + i, &v, std::min<size_t>(8, d.bytes.size() - i));
    }
    if (t == DType::Bool)
        for (std::byte &b : d.bytes)
            b = std::byte(uint8_t(b) & 1);
    return d;
}

// The CUDA value-difference kernels against the shared scalar code on the CPU, segment by
// segment merged in order as the backend's CPU path does: the same bits, for pairs of several
// dtype combinations and awkward sizes.
int checkValueDiff()
{
    using namespace kernels;
    int failures = 0;
    const DType pairs[][2] = {
        {DType::Float32, DType::Float32},          {DType::BFloat16, DType::BFloat16},
        {DType::Float16, DType::Float16},          {DType::Float32, DType::BFloat16},
        {DType::Float64, DType::Float32},          {DType::Int64, DType::Int64},
        {DType::Float8E4M3FN, DType::Float8E4M3FN}};
    auto code = [](DType t) {
        switch (t) {
        case DType::Float32:
            return int(kF32);
        case DType::BFloat16:
            return int(kBF16);
        case DType::Float16:
            return int(kF16);
        case DType::Float64:
            return int(kF64);
        case DType::Int64:
            return int(kI64);
        default:
            return int(kF8E4M3FN);
        }
    };
    for (const auto &pair : pairs)
        for (int64_t n : {int64_t(1), int64_t(4095), int64_t(4097), (int64_t(1) << 20) + 13}) {
            const TensorData a = randomData(pair[0], n, uint64_t(n) * 7 + 1);
            TensorData b = randomData(pair[1], n, uint64_t(n) * 7 + 2);
            // Half the pairs equal where the dtypes match: the equal-pair paths run too.
            if (pair[0] == pair[1])
                std::memcpy(b.bytes.data(), a.bytes.data(), b.bytes.size() / 2);
            const int ca = code(pair[0]), cb = code(pair[1]);
            const int sa = elementSize(pair[0]), sb = elementSize(pair[1]);
            const DiffParams p{1e-3, 1e-2, pair[0] == DType::Float64 ? int(kF32) : -1,
                               pair[0] == pair[1]};
            const auto *pa = reinterpret_cast<const unsigned char *>(a.bytes.data());
            const auto *pb = reinterpret_cast<const unsigned char *>(b.bytes.data());
            DiffAccum cpu = emptyDiff(), gpu = emptyDiff();
            Accum cpuA = emptyAccum(), cpuB = emptyAccum(), gpuA = emptyAccum(),
                  gpuB = emptyAccum();
            unsigned long long histCpu[kDiffBins] = {}, histGpu[kDiffBins] = {};
            for (int64_t s = 0; s * kSegment < n; ++s) {
                const int64_t begin = s * kSegment, end = std::min(n, begin + kSegment);
                mergeDiff(cpu, diffSegment(pa, ca, sa, pb, cb, sb, begin, end, 0, p, histCpu));
                merge(cpuA, foldSegment(pa, sa, ca, begin, end));
                merge(cpuB, foldSegment(pb, sb, cb, begin, end));
            }
            const char *error = nullptr;
            const bool ran =
                deviceValueDiff(pa, ca, sa, pb, cb, sb, n, 0, p, gpu, histGpu, gpuA, gpuB, error);
            const bool ok = ran && !std::memcmp(&cpu, &gpu, sizeof cpu) &&
                            !std::memcmp(histCpu, histGpu, sizeof histCpu) &&
                            !std::memcmp(&cpuA, &gpuA, sizeof cpuA) &&
                            !std::memcmp(&cpuB, &gpuB, sizeof cpuB);
            failures += !ok;
            std::printf("{\"value_diff\": \"%.*s/%.*s\", \"n\": %lld, \"same\": %s}\n",
                        int(dtypeName(pair[0]).size()), dtypeName(pair[0]).data(),
                        int(dtypeName(pair[1]).size()), dtypeName(pair[1]).data(), (long long)n,
                        ok ? "true" : "false");
        }
    return failures;
}

} // namespace

int main(int argc, char **argv)
{
    if (!builtWithCuda() || cudaDevices().empty()) {
        std::puts("{\"error\": \"no CUDA device\"}");
        return 2;
    }
    const auto dev = cudaDevices().front();
    std::printf("{\"device\": \"%s\", \"memory_mib\": %llu}\n", dev.name.c_str(),
                dev.memoryBytes >> 20);
    int failures = 0;
    const DType types[] = {DType::Float32,      DType::BFloat16,   DType::Float16, DType::Float64,
                           DType::Float8E4M3FN, DType::Float8E5M2, DType::Int32,   DType::Int8,
                           DType::UInt8,        DType::Bool,       DType::Int64};
    for (DType t : types)
        for (int64_t n : {int64_t(1), int64_t(7), int64_t(4095), int64_t(4097), int64_t(1) << 20,
                          (int64_t(1) << 22) + 13}) {
            const TensorData d = randomData(t, n, uint64_t(n) * 31 + uint64_t(t));
            auto cpu = computeHealth(d, ComputeDevice::Cpu);
            auto gpu = computeHealth(d, ComputeDevice::Cuda);
            const bool ok = cpu && gpu && same(*cpu, *gpu);
            failures += !ok;
            std::printf("{\"dtype\": \"%.*s\", \"n\": %lld, \"same\": %s%s%s}\n",
                        int(dtypeName(t).size()), dtypeName(t).data(), (long long)n,
                        ok ? "true" : "false", gpu ? "" : ", \"error\": \"",
                        gpu ? "" : (gpu.error().message + "\"").c_str());
        }

    // verify --threads calls the device from several threads at once: each must still get its
    // own tensor's bits.
    {
        constexpr int kThreads = 8;
        std::vector<TensorData> data;
        std::vector<TensorHealth> want;
        for (int t = 0; t < kThreads; ++t) {
            data.push_back(randomData(t % 2 ? DType::BFloat16 : DType::Float32,
                                      (int64_t(1) << 21) + t * 4099, uint64_t(100 + t)));
            want.push_back(*computeHealth(data.back(), ComputeDevice::Cpu));
        }
        std::atomic<int> wrong{0};
        std::vector<std::thread> pool;
        for (int t = 0; t < kThreads; ++t)
            pool.emplace_back([&, t] {
                for (int rep = 0; rep < 4; ++rep) {
                    auto h = computeHealth(data[size_t(t)], ComputeDevice::Cuda);
                    wrong += !h || !same(*h, want[size_t(t)]);
                }
            });
        for (std::thread &th : pool)
            th.join();
        failures += wrong;
        std::printf("{\"concurrent_threads\": %d, \"same\": %s}\n", kThreads,
                    wrong ? "false" : "true");
    }

    failures += checkValueDiff();

    const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 1024;
    const TensorData big = randomData(DType::BFloat16, mib * (1 << 20) / 2, 7);
    using Clock = std::chrono::steady_clock;
    double best[2] = {1e300, 1e300};
    for (int rep = 0; rep < 3; ++rep)
        for (int k = 0; k < 2; ++k) {
            const auto t0 = Clock::now();
            auto h = computeHealth(big, k ? ComputeDevice::Cuda : ComputeDevice::Cpu);
            const double s = std::chrono::duration<double>(Clock::now() - t0).count();
            if (!h)
                return 1;
            best[k] = std::min(best[k], s);
        }
    std::printf(
        "{\"throughput_bytes\": %zu, \"cpu_GBps\": %.2f, \"cuda_GBps_with_upload\": %.2f}\n",
        big.bytes.size(), double(big.bytes.size()) / best[0] / 1e9,
        double(big.bytes.size()) / best[1] / 1e9);
    // The value-difference kernel against the device's own copy bandwidth (data on the device).
    for (const auto &[code, size, name] : {std::tuple{int(kernels::kF32), 4, "float32"},
                                           std::tuple{int(kernels::kBF16), 2, "bfloat16"}}) {
        double kernelGBps = 0, copyGBps = 0;
        const char *error = nullptr;
        const int64_t n = mib * (1 << 20) / size;
        if (kernels::deviceValueDiffSpeed(n, code, size, 3, kernelGBps, copyGBps, error))
            std::printf("{\"value_diff\": \"%s\", \"pairs\": %lld, \"kernel_GBps\": %.1f, "
                        "\"device_copy_GBps\": %.1f, \"fraction_of_copy\": %.2f}\n",
                        name, (long long)n, kernelGBps, copyGBps, kernelGBps / copyGBps);
        else
            std::printf("{\"value_diff\": \"%s\", \"error\": \"%s\"}\n", name, error);
    }
    std::printf("{\"failures\": %d}\n", failures);
    return failures ? 1 : 0;
}
