// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/checkpoint.h"

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace shardscope {

/** A dense tensor value: contiguous, row-major, little-endian bytes. */
struct TensorData
{
    DType dtype = DType::Unknown;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
    int64_t numel() const;
};

/** A sub-box of a tensor: per dimension, start and extent. Empty = the whole tensor. */
struct Box
{
    std::vector<int64_t> offsets;
    std::vector<int64_t> sizes;
};

/**
 * Reads a tensor (or a sub-box of it) by assembling it from its stored chunks. Only chunks that
 * intersect the box are read; holes that no chunk covers are an error naming the first one.
 */
Result<TensorData> readTensor(const CheckpointIndex &index, const TensorEntry &entry,
                              const Box &box = {});
/**
 * readTensor() into the caller's memory (row-major, exactly the box's bytes): no allocation, so
 * a caller that reuses its buffer touches no fresh pages.
 */
Status readTensorInto(const CheckpointIndex &index, const TensorEntry &entry, const Box &box,
                      std::span<std::byte> out);
/**
 * Whether `expected` (the box's bytes, row-major) is bit for bit what is stored: read in pieces
 * that stay in cache, where readTensorInto() and a comparison would copy the box through memory.
 */
Result<bool> sameAsStored(const CheckpointIndex &index, const TensorEntry &entry, const Box &box,
                          std::span<const std::byte> expected);

struct TensorStats
{
    int64_t count = 0;  ///< elements (complex: real and imaginary parts count separately)
    int64_t finite = 0; ///< elements that took part in min/max/mean/std
    int64_t nanCount = 0;
    int64_t posInfCount = 0;
    int64_t negInfCount = 0;
    double min = 0, max = 0, mean = 0, std = 0; ///< std: population (unbiased = false)
    double l2 = 0;
};

/** Statistics over the finite elements, accumulated in double precision. */
Result<TensorStats> computeStats(const TensorData &data);

/** What a dtype cast does to stored values (torch's own conversion, as DCP's load copies). */
struct CastLoss
{
    double maxAbs = 0;       ///< worst |cast(x) - x| (infinite when a value overflows)
    double maxRel = 0;       ///< worst |cast(x) - x| / |x| over non-zero x
    int64_t changed = 0;     ///< elements the cast changes
    int64_t count = 0;       ///< elements measured
    int64_t worstIndex = -1; ///< flat index of the worst |change|
    double worstValue = 0;   ///< the stored value there
};

/** Whether a cast between floating dtypes can change values (fewer exponent or mantissa bits). */
bool narrowingCast(DType from, DType to);
/** Measures the cast of every element of `stored` to `to` (floating dtypes). */
Result<CastLoss> measureCast(const TensorData &stored, DType to);

/** `data` cast to `to` by torch's own conversion (what DCP's load copy_ does). */
Result<TensorData> castTensor(const TensorData &data, DType to);

/** SHA-256 of the contiguous row-major little-endian bytes, lower-case hex. */
std::string sha256Hex(const TensorData &data);
std::string sha256Hex(std::span<const std::byte> bytes);

} // namespace shardscope
