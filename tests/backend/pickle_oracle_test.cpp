// SPDX-License-Identifier: MIT
// Every pickle Python's own pickler wrote (tools/make_pickles.py, protocols 2-5) decodes to the
// value Python described next to it.
#include "read/mappedfile.h"
#include "read/pickle.h"

#include "testenv.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace shardscope;
using namespace shardscope::detail;

namespace {

std::string hex(const std::string &b)
{
    static const char *h = "0123456789abcdef";
    std::string s;
    for (unsigned char c : b) {
        s += h[c >> 4];
        s += h[c & 15];
    }
    return s;
}

json describe(const PyValue &v)
{
    using K = PyValue::Kind;
    switch (v.kind) {
    case K::None:
        return nullptr;
    case K::Bool:
        return v.boolean;
    case K::Int:
        return v.integer;
    case K::BigInt:
        return {{"bigint", v.text}};
    case K::Float:
        if (std::isnan(v.real))
            return {{"float", "nan"}};
        if (std::isinf(v.real))
            return {{"float", v.real > 0 ? "inf" : "-inf"}};
        return {{"float", v.real}};
    case K::Str:
        return v.text;
    case K::Bytes:
        return {{"bytes", hex(v.text)}};
    case K::Tuple: {
        json a = json::array();
        for (const PyValue &i : v.items)
            a.push_back(describe(i));
        return {{"tuple", a}};
    }
    case K::List: {
        json a = json::array();
        for (const PyValue &i : v.items)
            a.push_back(describe(i));
        return a;
    }
    case K::Dict: {
        json a = json::array();
        for (const auto &[k, x] : v.dict)
            a.push_back(json::array({describe(k), describe(x)}));
        return {{"dict", a}};
    }
    case K::Set:
        return {{"set", v.items.size()}};
    case K::Global:
        return {{"global", v.text + "." + v.name}};
    case K::Object:
        return {{"object", v.text + "." + v.name}};
    default:
        return {{"unexpected", v.summary()}};
    }
}

// Python writes floats as repr() text; compare numerically.
bool sameJson(const json &want, const json &got)
{
    if (want.is_object() && want.contains("float") && got.is_object() && got.contains("float")) {
        if (want["float"].is_string() && !got["float"].is_string())
            return std::strtod(want["float"].get<std::string>().c_str(), nullptr) ==
                   got["float"].get<double>();
        return want == got;
    }
    if (want.is_number() && got.is_number())
        return want == got; // integer vs unsigned storage is not a difference
    if (want.type() != got.type() || want.size() != got.size())
        return false;
    if (want.is_array() || want.is_object()) {
        auto a = want.begin();
        auto b = got.begin();
        for (; a != want.end(); ++a, ++b) {
            if (want.is_object() && a.key() != b.key())
                return false;
            if (!sameJson(*a, *b))
                return false;
        }
        return true;
    }
    return want == got;
}

} // namespace

TEST(PickleOracle, PythonPicklesDecodeToTheirValues)
{
    const std::string dir = picklesDir();
    if (!fs::exists(dir))
        GTEST_SKIP() << "pickles not generated (run through ctest)";
    int checked = 0;
    for (const auto &e : fs::directory_iterator(dir)) {
        if (e.path().extension() != ".pkl")
            continue;
        auto f = MappedFile::open(e.path().string());
        ASSERT_TRUE(f.ok());
        auto arena = parsePickle((*f)->bytes());
        ASSERT_TRUE(arena.ok()) << e.path() << ": " << arena.error().toString();
        fs::path jp = e.path();
        jp.replace_extension(".json");
        std::ifstream in(jp);
        const json want = json::parse(in);
        const json got = describe(arena->toPyValue(arena->root(), 64, 1u << 22));
        EXPECT_TRUE(sameJson(want, got))
            << e.path().filename() << "\nwant " << want.dump() << "\n got " << got.dump();
        ++checked;
    }
    EXPECT_EQ(checked, 40);
}
