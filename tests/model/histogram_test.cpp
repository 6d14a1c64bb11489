// SPDX-License-Identifier: MIT
#include "model/formatting.h"
#include "model/histogram.h"
#include "model/naturalcompare.h"
#include "model/pyvalueformat.h"

#include <shardscope/pyvalue.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

using namespace shardscope;
using namespace shardscope::model;

namespace {

template<typename T>
TensorData makeData(DType dtype, const std::vector<T> &values)
{
    TensorData d;
    d.dtype = dtype;
    d.shape = {int64_t(values.size())};
    d.bytes.resize(values.size() * sizeof(T));
    std::memcpy(d.bytes.data(), values.data(), d.bytes.size());
    return d;
}

std::vector<double> decode(const TensorData &d)
{
    std::vector<double> out;
    EXPECT_TRUE(forEachValue(d, [&](double v) { out.push_back(v); }));
    return out;
}

} // namespace

TEST(Histogram, DecodesFloatingPointFormats)
{
    // float16: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal)
    EXPECT_EQ(decode(makeData<uint16_t>(DType::Float16, {0x3C00, 0xC000, 0x7BFF, 0x0001})),
              (std::vector<double>{1.0, -2.0, 65504.0, std::ldexp(1.0, -24)}));
    // bfloat16: 1.0, -0.5, 3.0
    EXPECT_EQ(decode(makeData<uint16_t>(DType::BFloat16, {0x3F80, 0xBF00, 0x4040})),
              (std::vector<double>{1.0, -0.5, 3.0}));
    // float8_e4m3fn: 1.0 (0x38), -448 (0xFE, max), 2^-9 (0x01), NaN (0x7F)
    const auto e4m3 = decode(makeData<uint8_t>(DType::Float8E4M3FN, {0x38, 0xFE, 0x01, 0x7F}));
    EXPECT_EQ(e4m3[0], 1.0);
    EXPECT_EQ(e4m3[1], -448.0);
    EXPECT_EQ(e4m3[2], std::ldexp(1.0, -9));
    EXPECT_TRUE(std::isnan(e4m3[3]));
    // float8_e5m2: 1.0 (0x3C), 57344 (0x7B), inf (0x7C)
    const auto e5m2 = decode(makeData<uint8_t>(DType::Float8E5M2, {0x3C, 0x7B, 0x7C}));
    EXPECT_EQ(e5m2[0], 1.0);
    EXPECT_EQ(e5m2[1], 57344.0);
    EXPECT_TRUE(std::isinf(e5m2[2]));
    EXPECT_EQ(decode(makeData<uint8_t>(DType::Float8E8M0FNU, {127, 130})),
              (std::vector<double>{1.0, 8.0}));
    EXPECT_EQ(decode(makeData<double>(DType::Float64, {0.25, -1e300})),
              (std::vector<double>{0.25, -1e300}));
}

TEST(Histogram, DecodesIntegersBoolAndComplex)
{
    EXPECT_EQ(decode(makeData<int8_t>(DType::Int8, {-128, 127})), (std::vector<double>{-128, 127}));
    EXPECT_EQ(decode(makeData<int64_t>(DType::Int64, {-5, 1LL << 40})),
              (std::vector<double>{-5, double(1LL << 40)}));
    EXPECT_EQ(decode(makeData<uint16_t>(DType::UInt16, {65535})), (std::vector<double>{65535}));
    EXPECT_EQ(decode(makeData<uint8_t>(DType::Bool, {0, 1, 2})), (std::vector<double>{0, 1, 1}));
    TensorData c = makeData<float>(DType::Complex64, {1.0f, -2.0f, 3.0f, 4.0f});
    c.shape = {2};
    EXPECT_EQ(decode(c), (std::vector<double>{1, -2, 3, 4}));
    TensorData unknown = makeData<uint8_t>(DType::Unknown, {1});
    EXPECT_FALSE(forEachValue(unknown, [](double) {}));
    TensorData shortBytes = makeData<float>(DType::Float32, {1.0f});
    shortBytes.shape = {2};
    EXPECT_FALSE(forEachValue(shortBytes, [](double) {}));
}

TEST(Histogram, CountsFiniteValuesInEqualBins)
{
    std::vector<float> v(100);
    std::iota(v.begin(), v.end(), 0.0f);
    v.push_back(NAN);
    v.push_back(INFINITY);
    const auto h = computeHistogram(makeData<float>(DType::Float32, v), 0.0, 99.0, 10);
    ASSERT_EQ(h.size(), 10u);
    EXPECT_EQ(std::accumulate(h.begin(), h.end(), uint64_t(0)), 100u);
    EXPECT_EQ(h[0], 10u); // 0..9.9 → 0..9
    EXPECT_EQ(h[9], 10u); // 89.1..99 → 90..99, the maximum clamped in

    const auto same = computeHistogram(makeData<float>(DType::Float32, {2, 2, 2}), 2.0, 2.0, 4);
    EXPECT_EQ(std::accumulate(same.begin(), same.end(), uint64_t(0)), 3u);
    EXPECT_TRUE(computeHistogram(makeData<uint8_t>(DType::Unknown, {1}), 0, 1, 4).empty());
}

TEST(Formatting, HumanReadableText)
{
    EXPECT_EQ(formatBytes(0), QStringLiteral("0 B"));
    EXPECT_EQ(formatBytes(1023), QStringLiteral("1023 B"));
    EXPECT_EQ(formatBytes(1536), QStringLiteral("1.50 KiB"));
    EXPECT_EQ(formatBytes(uint64_t(671) << 30), QStringLiteral("671 GiB"));
    const int64_t shape[] = {7168, 2048};
    EXPECT_EQ(formatShape(shape), QStringLiteral("[7168, 2048]"));
    EXPECT_EQ(formatShape({}), QStringLiteral("[]"));
    EXPECT_EQ(formatCount(1234567), QStringLiteral("1,234,567"));
    EXPECT_EQ(formatCount(999), QStringLiteral("999"));
    EXPECT_EQ(formatReal(NAN), QStringLiteral("nan"));
    EXPECT_EQ(formatReal(-INFINITY), QStringLiteral("-inf"));
    EXPECT_EQ(formatReal(0.5), QStringLiteral("0.5"));
}

TEST(PyValueFormat, ShortValuesStayOnOneLineLongOnesAreIndented)
{
    PyValue i;
    i.kind = PyValue::Kind::Int;
    i.integer = 7;
    PyValue s;
    s.kind = PyValue::Kind::Str;
    s.text = "adam";
    PyValue d;
    d.kind = PyValue::Kind::Dict;
    d.dict.emplace_back(s, i);
    EXPECT_EQ(formatPyValue(d), QStringLiteral("{'adam': 7}"));

    PyValue ns;
    ns.kind = PyValue::Kind::Object;
    ns.text = "argparse";
    ns.name = "Namespace";
    ns.items.resize(2);
    ns.items[0].kind = PyValue::Kind::Tuple;
    ns.items[1].kind = PyValue::Kind::Dict;
    for (int k = 0; k < 30; ++k) {
        PyValue key;
        key.kind = PyValue::Kind::Str;
        key.text = "option_" + std::to_string(k);
        ns.items[1].dict.emplace_back(key, i);
    }
    const QString text = formatPyValue(ns);
    EXPECT_TRUE(text.startsWith(QStringLiteral("argparse.Namespace(\n    option_0=7,\n")));
    EXPECT_TRUE(text.endsWith(QStringLiteral("option_29=7,\n)")));
    EXPECT_TRUE(formatPyValue(ns, 5).endsWith(QStringLiteral("(output truncated)")));
}

TEST(NaturalCompare, NumbersByValueTextCaseInsensitive)
{
    auto lt = [](const char *a, const char *b) {
        return naturalCompare(QString::fromUtf8(a), QString::fromUtf8(b)) < 0;
    };
    EXPECT_TRUE(lt("2", "10"));
    EXPECT_TRUE(lt("layers.9.w", "layers.10.w"));
    EXPECT_TRUE(lt("weight2_w", "weight10_w"));
    EXPECT_TRUE(lt("Alpha", "beta"));
    EXPECT_TRUE(lt("a", "a1"));
    EXPECT_TRUE(lt("1", "01"));
    EXPECT_TRUE(lt("99999999999999999999", "100000000000000000000")); // beyond 64 bits
    EXPECT_FALSE(lt("10", "2"));
    EXPECT_EQ(naturalCompare(u"x7", u"x7"), 0);
}

TEST(PyValueFormat, FloatsPrintLikePythonRepr)
{
    auto repr = [](double x) {
        PyValue v;
        v.kind = PyValue::Kind::Float;
        v.real = x;
        return formatPyValue(v).toStdString();
    };
    EXPECT_EQ(repr(0.00039), "0.00039");
    EXPECT_EQ(repr(3.9e-05), "3.9e-05");
    EXPECT_EQ(repr(0.1), "0.1");
    EXPECT_EQ(repr(10000.0), "10000.0");
    EXPECT_EQ(repr(-1.5), "-1.5");
    EXPECT_EQ(repr(0.0), "0.0");
    EXPECT_EQ(repr(1e16), "1e+16");
    EXPECT_EQ(repr(123456.789), "123456.789");
    EXPECT_EQ(repr(NAN), "nan");
}
