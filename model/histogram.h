// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace shardscope::model {

/**
 * Calls `fn(double)` for every element of `data`, decoded from its little-endian bytes
 * (complex: real and imaginary parts in turn, as computeStats counts them). Returns false, and
 * calls nothing, for a dtype it cannot decode or bytes that do not match the shape.
 */
bool forEachValue(const TensorData &data, const std::function<void(double)> &fn);

/** One element of `data` as a double (same decoding as forEachValue); NaN when out of range. */
double valueAt(const TensorData &data, int64_t i);

/**
 * Counts the finite values of `data` in `bins` equal bins over [lo, hi] (values outside are
 * clamped into the end bins). Empty when the dtype cannot be decoded.
 */
std::vector<uint64_t> computeHistogram(const TensorData &data, double lo, double hi, int bins);

} // namespace shardscope::model
