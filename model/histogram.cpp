// SPDX-License-Identifier: MIT
#include "histogram.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace shardscope::model {

namespace {

template<typename T>
T load(const std::byte *p)
{
    T v;
    std::memcpy(&v, p, sizeof v);
    return v; // little-endian host (x86_64, aarch64), as the backend assumes
}

float halfToFloat(uint16_t h)
{
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    const uint32_t mant = h & 0x3FF;
    if (exp == 0) {
        const float v = std::ldexp(float(mant), -24); // subnormal or zero
        return sign ? -v : v;
    }
    if (exp == 31)
        return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13)); // inf / nan
    return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

float bfloat16ToFloat(uint16_t b)
{
    return std::bit_cast<float>(uint32_t(b) << 16);
}

// Minifloats with `e` exponent and `m` mantissa bits, exponent bias `bias`.
double minifloat(uint8_t b, int e, int m, int bias)
{
    const bool neg = b & 0x80;
    const int exp = (b >> m) & ((1 << e) - 1);
    const int mant = b & ((1 << m) - 1);
    const double v = exp == 0 ? std::ldexp(double(mant), 1 - bias - m)
                              : std::ldexp(double(mant | (1 << m)), exp - bias - m);
    return neg ? -v : v;
}

double e4m3fn(uint8_t b)
{
    if ((b & 0x7F) == 0x7F)
        return std::numeric_limits<double>::quiet_NaN();
    return minifloat(b, 4, 3, 7);
}

double e5m2(uint8_t b)
{
    return halfToFloat(uint16_t(b) << 8);
}

double e4m3fnuz(uint8_t b)
{
    if (b == 0x80)
        return std::numeric_limits<double>::quiet_NaN();
    return minifloat(b, 4, 3, 8);
}

double e5m2fnuz(uint8_t b)
{
    if (b == 0x80)
        return std::numeric_limits<double>::quiet_NaN();
    return minifloat(b, 5, 2, 16);
}

double e8m0(uint8_t b)
{
    if (b == 0xFF)
        return std::numeric_limits<double>::quiet_NaN();
    return std::ldexp(1.0, int(b) - 127);
}

// Number of scalar parts per element and a decoder for part `i`.
struct Decoder
{
    int parts = 0;
    double (*part)(const std::byte *, int64_t) = nullptr;
};

template<typename T>
double plain(const std::byte *p, int64_t i)
{
    return double(load<T>(p + i * int64_t(sizeof(T))));
}

Decoder decoderFor(DType t)
{
    switch (t) {
    case DType::Float64:
        return {1, plain<double>};
    case DType::Float32:
        return {1, plain<float>};
    case DType::Float16:
        return {1, [](const std::byte *p, int64_t i) {
                    return double(halfToFloat(load<uint16_t>(p + 2 * i)));
                }};
    case DType::BFloat16:
        return {1, [](const std::byte *p, int64_t i) {
                    return double(bfloat16ToFloat(load<uint16_t>(p + 2 * i)));
                }};
    case DType::Float8E4M3FN:
        return {1, [](const std::byte *p, int64_t i) { return e4m3fn(uint8_t(p[i])); }};
    case DType::Float8E5M2:
        return {1, [](const std::byte *p, int64_t i) { return e5m2(uint8_t(p[i])); }};
    case DType::Float8E4M3FNUZ:
        return {1, [](const std::byte *p, int64_t i) { return e4m3fnuz(uint8_t(p[i])); }};
    case DType::Float8E5M2FNUZ:
        return {1, [](const std::byte *p, int64_t i) { return e5m2fnuz(uint8_t(p[i])); }};
    case DType::Float8E8M0FNU:
        return {1, [](const std::byte *p, int64_t i) { return e8m0(uint8_t(p[i])); }};
    case DType::Complex128:
        return {2, plain<double>};
    case DType::Complex64:
        return {2, plain<float>};
    case DType::Complex32:
        return {2, [](const std::byte *p, int64_t i) {
                    return double(halfToFloat(load<uint16_t>(p + 2 * i)));
                }};
    case DType::Int64:
        return {1, plain<int64_t>};
    case DType::Int32:
        return {1, plain<int32_t>};
    case DType::Int16:
        return {1, plain<int16_t>};
    case DType::Int8:
        return {1, plain<int8_t>};
    case DType::UInt64:
        return {1, plain<uint64_t>};
    case DType::UInt32:
        return {1, plain<uint32_t>};
    case DType::UInt16:
        return {1, plain<uint16_t>};
    case DType::UInt8:
        return {1, plain<uint8_t>};
    case DType::Bool:
        return {1, [](const std::byte *p, int64_t i) { return p[i] != std::byte{0} ? 1.0 : 0.0; }};
    case DType::Unknown:
        break;
    }
    return {};
}

// Scalars in `data`, or -1 when the dtype is not decodable or the bytes are short.
int64_t scalarCount(const TensorData &data, const Decoder &d)
{
    const int64_t n = data.numel();
    const int size = elementSize(data.dtype);
    if (!d.part || n < 0 || size <= 0 || data.bytes.size() < uint64_t(n) * uint64_t(size))
        return -1;
    return n * d.parts;
}

} // namespace

bool forEachValue(const TensorData &data, const std::function<void(double)> &fn)
{
    const Decoder d = decoderFor(data.dtype);
    const int64_t count = scalarCount(data, d);
    if (count < 0)
        return false;
    const std::byte *p = data.bytes.data();
    for (int64_t i = 0; i < count; ++i)
        fn(d.part(p, i));
    return true;
}

double valueAt(const TensorData &data, int64_t i)
{
    const Decoder d = decoderFor(data.dtype);
    const int64_t count = scalarCount(data, d);
    if (i < 0 || i >= count)
        return std::numeric_limits<double>::quiet_NaN();
    return d.part(data.bytes.data(), i);
}

std::vector<uint64_t> computeHistogram(const TensorData &data, double lo, double hi, int bins)
{
    const Decoder d = decoderFor(data.dtype);
    const int64_t count = scalarCount(data, d);
    if (count < 0 || bins <= 0)
        return {};
    std::vector<uint64_t> out(size_t(bins), 0);
    if (!std::isfinite(lo) || !std::isfinite(hi))
        return out;
    if (!(hi > lo)) { // one distinct value (or none): everything lands in the middle bin
        lo -= 0.5;
        hi += 0.5;
    }
    const double scale = double(bins) / (hi - lo);
    const std::byte *p = data.bytes.data();
    for (int64_t i = 0; i < count; ++i) {
        const double x = d.part(p, i);
        if (!std::isfinite(x))
            continue;
        const double pos = (x - lo) * scale;
        const int b = pos <= 0 ? 0 : pos >= bins ? bins - 1 : int(pos);
        ++out[size_t(b)];
    }
    return out;
}

} // namespace shardscope::model
