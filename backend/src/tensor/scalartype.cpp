// SPDX-License-Identifier: MIT
#include "tensor/scalartype.h"

namespace shardscope::detail {

std::optional<c10::ScalarType> scalarType(DType t)
{
    switch (t) {
    case DType::Float64:
        return at::kDouble;
    case DType::Float32:
        return at::kFloat;
    case DType::Float16:
        return at::kHalf;
    case DType::BFloat16:
        return at::kBFloat16;
    case DType::Float8E4M3FN:
        return at::kFloat8_e4m3fn;
    case DType::Float8E5M2:
        return at::kFloat8_e5m2;
    case DType::Float8E4M3FNUZ:
        return at::kFloat8_e4m3fnuz;
    case DType::Float8E5M2FNUZ:
        return at::kFloat8_e5m2fnuz;
    case DType::Float8E8M0FNU:
        return at::kFloat8_e8m0fnu;
    case DType::Complex128:
        return at::kComplexDouble;
    case DType::Complex64:
        return at::kComplexFloat;
    case DType::Complex32:
        return at::kComplexHalf;
    case DType::Int64:
        return at::kLong;
    case DType::Int32:
        return at::kInt;
    case DType::Int16:
        return at::kShort;
    case DType::Int8:
        return at::kChar;
    case DType::UInt64:
        return at::kUInt64;
    case DType::UInt32:
        return at::kUInt32;
    case DType::UInt16:
        return at::kUInt16;
    case DType::UInt8:
        return at::kByte;
    case DType::Bool:
        return at::kBool;
    case DType::Float4E2M1FNx2:
        return at::kFloat4_e2m1fn_x2;
    case DType::Unknown:
        break;
    }
    return std::nullopt;
}

} // namespace shardscope::detail
