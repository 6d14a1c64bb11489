// SPDX-License-Identifier: MIT
// The CUDA value-difference path's narrow interface (as healthdevice.h is for health): C++17,
// no public headers, so that nvcc sees only this and the shared kernel code.
#pragma once

#include "diffcore.h"

namespace shardscope::kernels {

/**
 * Differences of `n` pairs on the GPU (valuediff.cu), `base` the flat index of pair 0: one
 * thread per segment runs diffSegment() and each side's foldSegment(); the host merges the
 * segments in index order, as the CPU path does, so both agree bit for bit. `hist` (kDiffBins)
 * is incremented. False with `error` set when there is no CUDA build (valuediff_none.cpp), no
 * device, or a CUDA call fails.
 */
bool deviceValueDiff(const unsigned char *a, int codeA, int sizeA, const unsigned char *b,
                     int codeB, int sizeB, int64_t n, int64_t base, const DiffParams &params,
                     DiffAccum &total, unsigned long long *hist, Accum &sideA, Accum &sideB,
                     const char *&error);

/**
 * The device's own speed, for bench/gpu_check.sh: the difference kernel over `n` pairs of code
 * `code` already on the device (no upload), and a device-to-device copy of the same bytes, each
 * timed with CUDA events (best of `reps`). GB/s count the bytes read (both sides; the copy's
 * read and write).
 */
bool deviceValueDiffSpeed(int64_t n, int code, int size, int reps, double &kernelGBps,
                          double &copyGBps, const char *&error);

} // namespace shardscope::kernels
