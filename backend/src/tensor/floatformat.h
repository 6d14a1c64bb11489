// SPDX-License-Identifier: MIT
// The exponent and mantissa widths of the floating dtypes a cast is measured between.
#pragma once

#include "shardscope/dtype.h"

#include <optional>

namespace shardscope::detail {

struct FloatFormat
{
    int exponentBits, mantissaBits;
};

inline std::optional<FloatFormat> floatFormat(DType t)
{
    switch (t) {
    case DType::Float64:
        return FloatFormat{11, 52};
    case DType::Float32:
        return FloatFormat{8, 23};
    case DType::Float16:
        return FloatFormat{5, 10};
    case DType::BFloat16:
        return FloatFormat{8, 7};
    case DType::Float8E4M3FN:
        return FloatFormat{4, 3};
    case DType::Float8E5M2:
        return FloatFormat{5, 2};
    default:
        return std::nullopt;
    }
}

} // namespace shardscope::detail
