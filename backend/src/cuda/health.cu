// SPDX-License-Identifier: MIT
// Tensor health on the GPU: one thread per segment folds it with the shared per-element code
// (kernels/healthcore.h); the host merges the segments in index order, as the CPU path does, so
// both agree bit for bit. Histogram bins and fingerprint words combine by integer addition.
#include "kernels/healthdevice.h"

#include <cuda_runtime.h>

#include <vector>

namespace shardscope::kernels {

namespace {

__global__ void foldSegments(const unsigned char *bytes, int64_t n, int elemSize, int code,
                             Accum *out, int64_t segments)
{
    const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (s >= segments)
        return;
    const int64_t begin = s * kSegment, end = begin + kSegment < n ? begin + kSegment : n;
    out[s] = foldSegment(bytes, elemSize, code, begin, end);
}

__global__ void histogramAndFingerprint(const unsigned char *bytes, int64_t n, int elemSize,
                                        int code, double lo, double hi, int bins,
                                        unsigned long long *hist, unsigned long long *fingerprint,
                                        int64_t size)
{
    __shared__ unsigned long long local[kMaxBins];
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const double scale = binScale(lo, hi, bins);
    for (int64_t i = first; i < n; i += stride) {
        const Decoded d = decode(bytes + i * elemSize, code);
        if (!d.nan && !d.inf)
            atomicAdd(&local[binOf(d.value, lo, scale, bins)], 1ull);
    }
    unsigned long long fp = 0;
    const int64_t words = (size + 7) / 8;
    for (int64_t w = first; w < words; w += stride)
        fp += fingerprintWords(bytes, size, w, w + 1);
    atomicAdd(fingerprint, fp);
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        atomicAdd(&hist[b], local[b]);
}

} // namespace

bool deviceHealth(const unsigned char *bytes, int64_t n, int elemSize, int code, int bins,
                  Accum &total, unsigned long long *histogram, unsigned long long &fingerprint,
                  const char *&error)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        cudaGetLastError();
        error = "no CUDA device";
        return false;
    }
    const int64_t size = n * elemSize, segments = (n + kSegment - 1) / kSegment;
    unsigned char *dBytes = nullptr;
    Accum *dAccum = nullptr;
    unsigned long long *dHist = nullptr, *dFp = nullptr;
    cudaError_t e = cudaMalloc(&dBytes, size_t(size > 0 ? size : 1));
    if (e == cudaSuccess)
        e = cudaMalloc(&dAccum, sizeof(Accum) * size_t(segments > 0 ? segments : 1));
    if (e == cudaSuccess)
        e = cudaMalloc(&dHist, sizeof(unsigned long long) * size_t(bins));
    if (e == cudaSuccess)
        e = cudaMalloc(&dFp, sizeof(unsigned long long));
    if (e == cudaSuccess && size > 0)
        e = cudaMemcpy(dBytes, bytes, size_t(size), cudaMemcpyHostToDevice);
    std::vector<Accum> parts(static_cast<size_t>(segments));
    if (e == cudaSuccess && segments > 0) {
        const int threads = 128;
        foldSegments<<<unsigned((segments + threads - 1) / threads), threads>>>(
            dBytes, n, elemSize, code, dAccum, segments);
        e = cudaMemcpy(parts.data(), dAccum, sizeof(Accum) * parts.size(), cudaMemcpyDeviceToHost);
    }
    total = emptyAccum();
    for (const Accum &a : parts) // index order, as the CPU path merges
        merge(total, a);
    if (e == cudaSuccess)
        e = cudaMemset(dHist, 0, sizeof(unsigned long long) * size_t(bins));
    if (e == cudaSuccess)
        e = cudaMemset(dFp, 0, sizeof(unsigned long long));
    if (e == cudaSuccess) {
        histogramAndFingerprint<<<1024, 256>>>(dBytes, n, elemSize, code, total.min, total.max,
                                               bins, dHist, dFp, size);
        e = cudaMemcpy(histogram, dHist, sizeof(unsigned long long) * size_t(bins),
                       cudaMemcpyDeviceToHost);
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(&fingerprint, dFp, sizeof(fingerprint), cudaMemcpyDeviceToHost);
    cudaFree(dBytes);
    cudaFree(dAccum);
    cudaFree(dHist);
    cudaFree(dFp);
    if (e != cudaSuccess) {
        error = cudaGetErrorString(e);
        return false;
    }
    return true;
}

} // namespace shardscope::kernels
