// SPDX-License-Identifier: MIT
#include "model/formatting.h"
#include "model/naturalcompare.h"
#include "model/pyvalueformat.h"
#include "model/tensordetails.h"

#include <shardscope/pyvalue.h>
#include <shardscope/session.h>

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

} // namespace

// The GUI's numbers are the backend's health kernels (model/histogram.cpp's own decoding is gone):
// what TensorDetails shows for these bytes is what the IEEE and OCP formats say they hold.
TEST(Numerics, DetailsComeFromTheHealthKernels)
{
    // float16: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal)
    TensorDetails f16;
    f16.stats = *tensorHealth(makeData<uint16_t>(DType::Float16, {0x3C00, 0xC000, 0x7BFF, 0x0001}));
    EXPECT_EQ(f16.stats.min, -2.0);
    EXPECT_EQ(f16.stats.max, 65504.0);
    EXPECT_EQ(f16.stats.denormalCount, 1);
    // float8_e4m3fn: 1.0 (0x38), -448 (0xFE, max), 2^-9 (0x01), NaN (0x7F)
    const auto e4m3 =
        *tensorHealth(makeData<uint8_t>(DType::Float8E4M3FN, {0x38, 0xFE, 0x01, 0x7F}));
    EXPECT_EQ(e4m3.min, -448.0);
    EXPECT_EQ(e4m3.max, 1.0);
    EXPECT_EQ(e4m3.nanCount, 1);
    EXPECT_EQ(e4m3.denormalCount, 1);
    // complex64: real and imaginary parts are elements, as inspect --stats counts them
    TensorData c = makeData<float>(DType::Complex64, {1.0f, -2.0f, 3.0f, 4.0f});
    c.shape = {2};
    const auto complex = *tensorHealth(c);
    EXPECT_EQ(complex.count, 4);
    EXPECT_EQ(complex.min, -2.0);
    EXPECT_EQ(complex.max, 4.0);
    EXPECT_EQ(std::accumulate(complex.histogram.begin(), complex.histogram.end(), int64_t(0)), 4);
    EXPECT_FALSE(tensorHealth(makeData<uint8_t>(DType::Unknown, {1})));

    // One value: one bar, centred on it.
    TensorDetails same;
    same.stats = *tensorHealth(makeData<float>(DType::Float32, {2, 2, 2}));
    setHistogram(same);
    EXPECT_EQ(same.histogramMin, 1.5);
    EXPECT_EQ(same.histogramMax, 2.5);
    EXPECT_EQ(same.histogram[same.histogram.size() / 2], 3u);
    EXPECT_EQ(std::accumulate(same.histogram.begin(), same.histogram.end(), uint64_t(0)), 3u);
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
    // A count takes its noun in the number it has: never "1 layers", "in 1 files".
    EXPECT_EQ(countOf(1, "file", "files"), QStringLiteral("1 file"));
    EXPECT_EQ(countOf(0, "file", "files"), QStringLiteral("0 files"));
    EXPECT_EQ(countOf(12345, "layer", "layers"), QStringLiteral("12,345 layers"));
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
