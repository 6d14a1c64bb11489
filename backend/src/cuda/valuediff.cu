// SPDX-License-Identifier: MIT
// Value differences on the GPU: one thread per segment runs the shared per-pair code
// (kernels/diffcore.h) and each side's health fold; the host merges the segments in index
// order, as the CPU path does, so both agree bit for bit. Histogram bins add as integers.
#include "kernels/diffdevice.h"

#include <cuda_runtime.h>

#include <vector>

namespace shardscope::kernels {

namespace {

__global__ void diffSegments(const unsigned char *a, int codeA, int sizeA, const unsigned char *b,
                             int codeB, int sizeB, int64_t n, int64_t base, DiffParams params,
                             DiffAccum *out, Accum *outA, Accum *outB, unsigned long long *hist,
                             int64_t segments)
{
    const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (s >= segments)
        return;
    const int64_t begin = s * kSegment, end = begin + kSegment < n ? begin + kSegment : n;
    unsigned long long local[kDiffBins];
    for (int k = 0; k < kDiffBins; ++k)
        local[k] = 0;
    out[s] = diffSegment(a, codeA, sizeA, b, codeB, sizeB, begin, end, base, params, local);
    outA[s] = foldSegment(a, sizeA, codeA, begin, end);
    outB[s] = foldSegment(b, sizeB, codeB, begin, end);
    for (int k = 0; k < kDiffBins; ++k)
        if (local[k])
            atomicAdd(&hist[k], local[k]);
}

// The device memory of one comparison: both sides, per-segment results, the histogram.
struct Buffers
{
    unsigned char *a = nullptr, *b = nullptr;
    DiffAccum *diff = nullptr;
    Accum *sideA = nullptr, *sideB = nullptr;
    unsigned long long *hist = nullptr;

    cudaError_t allocate(size_t bytesA, size_t bytesB, int64_t segments)
    {
        const size_t segs = size_t(segments > 0 ? segments : 1);
        cudaError_t e = cudaMalloc(&a, bytesA ? bytesA : 1);
        if (e == cudaSuccess)
            e = cudaMalloc(&b, bytesB ? bytesB : 1);
        if (e == cudaSuccess)
            e = cudaMalloc(&diff, sizeof(DiffAccum) * segs);
        if (e == cudaSuccess)
            e = cudaMalloc(&sideA, sizeof(Accum) * segs);
        if (e == cudaSuccess)
            e = cudaMalloc(&sideB, sizeof(Accum) * segs);
        if (e == cudaSuccess)
            e = cudaMalloc(&hist, sizeof(unsigned long long) * kDiffBins);
        return e;
    }
    void run(int codeA, int sizeA, int codeB, int sizeB, int64_t n, int64_t base,
             const DiffParams &params, int64_t segments) const
    {
        const int threads = 128;
        diffSegments<<<unsigned((segments + threads - 1) / threads), threads>>>(
            a, codeA, sizeA, b, codeB, sizeB, n, base, params, diff, sideA, sideB, hist, segments);
    }
    ~Buffers()
    {
        cudaFree(a);
        cudaFree(b);
        cudaFree(diff);
        cudaFree(sideA);
        cudaFree(sideB);
        cudaFree(hist);
    }
};

bool haveDevice(const char *&error)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        cudaGetLastError();
        error = "no CUDA device";
        return false;
    }
    return true;
}

bool failed(cudaError_t e, const char *&error)
{
    if (e == cudaSuccess)
        return false;
    error = cudaGetErrorString(e);
    return true;
}

} // namespace

bool deviceValueDiff(const unsigned char *a, int codeA, int sizeA, const unsigned char *b,
                     int codeB, int sizeB, int64_t n, int64_t base, const DiffParams &params,
                     DiffAccum &total, unsigned long long *hist, Accum &sideA, Accum &sideB,
                     const char *&error)
{
    if (!haveDevice(error))
        return false;
    const int64_t segments = (n + kSegment - 1) / kSegment;
    const size_t bytesA = size_t(n * sizeA), bytesB = size_t(n * sizeB);
    Buffers d;
    cudaError_t e = d.allocate(bytesA, bytesB, segments);
    if (e == cudaSuccess && bytesA)
        e = cudaMemcpy(d.a, a, bytesA, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && bytesB)
        e = cudaMemcpy(d.b, b, bytesB, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(d.hist, hist, sizeof(unsigned long long) * kDiffBins,
                       cudaMemcpyHostToDevice);
    std::vector<DiffAccum> parts(static_cast<size_t>(segments));
    std::vector<Accum> partsA(static_cast<size_t>(segments)), partsB(static_cast<size_t>(segments));
    if (e == cudaSuccess && segments > 0) {
        d.run(codeA, sizeA, codeB, sizeB, n, base, params, segments);
        e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cudaMemcpy(parts.data(), d.diff, sizeof(DiffAccum) * parts.size(),
                           cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            e = cudaMemcpy(partsA.data(), d.sideA, sizeof(Accum) * partsA.size(),
                           cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            e = cudaMemcpy(partsB.data(), d.sideB, sizeof(Accum) * partsB.size(),
                           cudaMemcpyDeviceToHost);
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(hist, d.hist, sizeof(unsigned long long) * kDiffBins,
                       cudaMemcpyDeviceToHost);
    if (failed(e, error))
        return false;
    for (size_t s = 0; s < parts.size(); ++s) { // index order, as the CPU path merges
        mergeDiff(total, parts[s]);
        merge(sideA, partsA[s]);
        merge(sideB, partsB[s]);
    }
    return true;
}

bool deviceValueDiffSpeed(int64_t n, int code, int size, int reps, double &kernelGBps,
                          double &copyGBps, const char *&error)
{
    if (!haveDevice(error))
        return false;
    const size_t bytes = size_t(n) * size_t(size);
    const int64_t segments = (n + kSegment - 1) / kSegment;
    Buffers d;
    cudaEvent_t start = nullptr, stop = nullptr;
    cudaError_t e = d.allocate(bytes, bytes, segments);
    if (e == cudaSuccess)
        e = cudaMemset(d.a, 0x3c, bytes); // finite values of every float code
    if (e == cudaSuccess)
        e = cudaMemset(d.b, 0x3b, bytes);
    if (e == cudaSuccess)
        e = cudaEventCreate(&start);
    if (e == cudaSuccess)
        e = cudaEventCreate(&stop);
    float best[2] = {1e30f, 1e30f};
    const DiffParams params{0.0, 0.0, -1, true};
    for (int rep = 0; rep < reps && e == cudaSuccess; ++rep)
        for (int k = 0; k < 2 && e == cudaSuccess; ++k) {
            cudaEventRecord(start);
            if (k == 0)
                d.run(code, size, code, size, n, 0, params, segments);
            else
                cudaMemcpy(d.b, d.a, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(stop);
            e = cudaEventSynchronize(stop);
            float ms = 0;
            if (e == cudaSuccess)
                e = cudaEventElapsedTime(&ms, start, stop);
            best[k] = ms < best[k] ? ms : best[k];
        }
    if (e == cudaSuccess)
        e = cudaGetLastError();
    kernelGBps = 2.0 * double(bytes) / (double(best[0]) * 1e-3) / 1e9;
    copyGBps = 2.0 * double(bytes) / (double(best[1]) * 1e-3) / 1e9;
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    return !failed(e, error);
}

} // namespace shardscope::kernels
