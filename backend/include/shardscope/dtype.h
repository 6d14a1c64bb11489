// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace shardscope {

/** Element types, named as torch names them. Unknown marks a dtype we can list but not decode. */
enum class DType : uint8_t {
    Unknown,
    Float64,
    Float32,
    Float16,
    BFloat16,
    Float8E4M3FN,
    Float8E5M2,
    Float8E4M3FNUZ,
    Float8E5M2FNUZ,
    Float8E8M0FNU,
    Complex128,
    Complex64,
    Complex32,
    Int64,
    Int32,
    Int16,
    Int8,
    UInt64,
    UInt32,
    UInt16,
    UInt8,
    Bool,
    /** Two float4 e2m1 values packed in a byte (torch.float4_e2m1fn_x2): one element a byte. */
    Float4E2M1FNx2,
};

/** torch's name ("bfloat16"); "unknown" for Unknown. */
std::string_view dtypeName(DType t);
/** Parses torch's name (as in `torch.bfloat16`); nullopt when not known. */
std::optional<DType> dtypeFromName(std::string_view torchName);
/** From a legacy storage class name ("BFloat16Storage"). */
std::optional<DType> dtypeFromStorageClass(std::string_view className);
/** The legacy storage class torch.save names for it ("BFloat16Storage"); empty for the dtypes
 *  torch.save writes as an UntypedStorage (float8, unsigned beyond uint8). */
std::string_view storageClassName(DType t);
/** Its safetensors dtype string ("BF16"); empty when safetensors has none. */
std::string_view safetensorsName(DType t);
/** From a safetensors dtype string ("BF16"). */
std::optional<DType> dtypeFromSafetensors(std::string_view st);
/** Bytes per element; 0 for Unknown. */
int elementSize(DType t);
bool isFloatingPoint(DType t);
bool isComplex(DType t);

} // namespace shardscope
