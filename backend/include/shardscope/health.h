// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope {

/** Health of a tensor: counts, moments over the finite values, a histogram and a fingerprint. */
struct TensorHealth
{
    int64_t count = 0, finite = 0, nanCount = 0, posInfCount = 0, negInfCount = 0,
            denormalCount = 0;
    double min = 0, max = 0, mean = 0, std = 0, l2 = 0; ///< std: population
    std::vector<int64_t> histogram; ///< finite values over [min, max], equal-width bins
    uint64_t fingerprint = 0;       ///< see kernels/healthcore.h
    std::string device;             ///< "cpu" or "cuda:N"
};

enum class ComputeDevice : uint8_t { Cpu, Cuda };

/**
 * Whether a tensor's values look like a fresh initialization rather than trained weights: every
 * value the constant a norm (1) or a bias (0) starts at, or mean and std within sampling noise
 * of Megatron's normal init (mean 0, std `initStd`, or the output layers' initStd / sqrt(2 L)
 * when `layers` > 0). Trained weights drift far outside that noise on any tensor of thousands of
 * elements. Empty when they do not look initial; otherwise one line saying why.
 */
std::string initialLikeness(const TensorHealth &h, double initStd = 0.02, int layers = 0);

/**
 * Health of a tensor (complex: its real and imaginary parts count as elements, as torch's
 * view_as_real shows them; so do statistics everywhere). CPU and CUDA run the same per-element code
 * (backend/src/kernels/healthcore.h) over the same segments merged in the same order, so they
 * agree bit for bit. Cuda fails with an error when the build or the machine has no CUDA.
 */
Result<TensorHealth> computeHealth(const TensorData &data,
                                   ComputeDevice device = ComputeDevice::Cpu, int bins = 64);

} // namespace shardscope
