// SPDX-License-Identifier: MIT
// The CUDA path's narrow interface: C++17 and no public headers, so that nvcc sees only this and
// healthcore.h.
#pragma once

#include "healthcore.h"

namespace shardscope::kernels {

/**
 * Folds, histograms and fingerprints `n` elements on the GPU (health.cu). False with `error`
 * set when there is no CUDA build (health_none.cpp), no device, or a CUDA call fails.
 */
bool deviceHealth(const unsigned char *bytes, int64_t n, int elemSize, int code, int bins,
                  Accum &total, unsigned long long *histogram, unsigned long long &fingerprint,
                  const char *&error);

} // namespace shardscope::kernels
