// SPDX-License-Identifier: MIT
#include "shardscope/dtype.h"
#include "shardscope/tensor.h"
#include "tensor/floatformat.h"

#include <array>
#include <utility>

namespace shardscope {

namespace {

struct DTypeInfo
{
    DType type;
    const char *name;
    int size;
    const char *storage;     // legacy typed storage class, or nullptr (UntypedStorage + v3)
    const char *safetensors; // safetensors dtype string, or nullptr
};

constexpr std::array kInfos = {
    DTypeInfo{DType::Float64, "float64", 8, "DoubleStorage", "F64"},
    DTypeInfo{DType::Float32, "float32", 4, "FloatStorage", "F32"},
    DTypeInfo{DType::Float16, "float16", 2, "HalfStorage", "F16"},
    DTypeInfo{DType::BFloat16, "bfloat16", 2, "BFloat16Storage", "BF16"},
    DTypeInfo{DType::Float8E4M3FN, "float8_e4m3fn", 1, nullptr, "F8_E4M3"},
    DTypeInfo{DType::Float8E5M2, "float8_e5m2", 1, nullptr, "F8_E5M2"},
    DTypeInfo{DType::Float8E4M3FNUZ, "float8_e4m3fnuz", 1, nullptr, "F8_E4M3FNUZ"},
    DTypeInfo{DType::Float8E5M2FNUZ, "float8_e5m2fnuz", 1, nullptr, "F8_E5M2FNUZ"},
    DTypeInfo{DType::Float8E8M0FNU, "float8_e8m0fnu", 1, nullptr, "F8_E8M0"},
    DTypeInfo{DType::Complex128, "complex128", 16, "ComplexDoubleStorage", "C128"},
    DTypeInfo{DType::Complex64, "complex64", 8, "ComplexFloatStorage", "C64"},
    DTypeInfo{DType::Complex32, "complex32", 4, nullptr, nullptr},
    DTypeInfo{DType::Int64, "int64", 8, "LongStorage", "I64"},
    DTypeInfo{DType::Int32, "int32", 4, "IntStorage", "I32"},
    DTypeInfo{DType::Int16, "int16", 2, "ShortStorage", "I16"},
    DTypeInfo{DType::Int8, "int8", 1, "CharStorage", "I8"},
    DTypeInfo{DType::UInt64, "uint64", 8, nullptr, "U64"},
    DTypeInfo{DType::UInt32, "uint32", 4, nullptr, "U32"},
    DTypeInfo{DType::UInt16, "uint16", 2, nullptr, "U16"},
    DTypeInfo{DType::UInt8, "uint8", 1, "ByteStorage", "U8"},
    DTypeInfo{DType::Bool, "bool", 1, "BoolStorage", "BOOL"},
    // safetensors writes it as "F4" with twice the last dimension (readSafetensors), so the
    // plain string mapping has no name for it.
    DTypeInfo{DType::Float4E2M1FNx2, "float4_e2m1fn_x2", 1, nullptr, nullptr},
};

// Python-side aliases that torch accepts as attribute names.
constexpr std::array<std::pair<const char *, DType>, 10> kAliases = {{
    {"float", DType::Float32},
    {"double", DType::Float64},
    {"half", DType::Float16},
    {"long", DType::Int64},
    {"int", DType::Int32},
    {"short", DType::Int16},
    {"cfloat", DType::Complex64},
    {"cdouble", DType::Complex128},
    {"chalf", DType::Complex32},
    {"complex32", DType::Complex32},
}};

const DTypeInfo *info(DType t)
{
    for (const auto &i : kInfos)
        if (i.type == t)
            return &i;
    return nullptr;
}

} // namespace

std::string_view dtypeName(DType t)
{
    const DTypeInfo *i = info(t);
    return i ? i->name : "unknown";
}

std::optional<DType> dtypeFromName(std::string_view n)
{
    if (n.starts_with("torch."))
        n.remove_prefix(6);
    for (const auto &i : kInfos)
        if (n == i.name)
            return i.type;
    for (const auto &[alias, t] : kAliases)
        if (n == alias)
            return t;
    return std::nullopt;
}

std::optional<DType> dtypeFromStorageClass(std::string_view c)
{
    for (const auto &i : kInfos)
        if (i.storage && c == i.storage)
            return i.type;
    return std::nullopt;
}

std::string_view storageClassName(DType t)
{
    const DTypeInfo *i = info(t);
    return i && i->storage ? i->storage : "";
}

std::string_view safetensorsName(DType t)
{
    const DTypeInfo *i = info(t);
    return i && i->safetensors ? i->safetensors : "";
}

std::optional<DType> dtypeFromSafetensors(std::string_view s)
{
    for (const auto &i : kInfos)
        if (i.safetensors && s == i.safetensors)
            return i.type;
    return std::nullopt;
}

int elementSize(DType t)
{
    const DTypeInfo *i = info(t);
    return i ? i->size : 0;
}

bool isFloatingPoint(DType t)
{
    switch (t) {
    case DType::Float64:
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float8E4M3FN:
    case DType::Float8E5M2:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0FNU:
    case DType::Float4E2M1FNx2:
        return true;
    default:
        return false;
    }
}

bool isComplex(DType t)
{
    return t == DType::Complex128 || t == DType::Complex64 || t == DType::Complex32;
}

bool narrowingCast(DType from, DType to)
{
    const auto a = detail::floatFormat(from), b = detail::floatFormat(to);
    return a && b && (b->exponentBits < a->exponentBits || b->mantissaBits < a->mantissaBits);
}

} // namespace shardscope
