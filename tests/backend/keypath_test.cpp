// SPDX-License-Identifier: MIT
#include <shardscope/checkpoint.h>

#include <gtest/gtest.h>

using shardscope::KeyPath;

namespace {
std::vector<std::string> roundTrip(const std::string &key, std::vector<std::string> parts)
{
    return KeyPath::fromParts(key, std::move(parts)).parts(key);
}
std::string dots(int n)
{
    std::string k = "p";
    for (int i = 0; i < n; ++i)
        k += ".p";
    return k;
}
} // namespace

TEST(KeyPath, DefaultSplitsEveryDot)
{
    KeyPath p;
    EXPECT_TRUE(p.splitsEveryDot());
    EXPECT_EQ(p.parts("a.b.c"), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_TRUE(KeyPath::fromParts("a.b.c", {"a", "b", "c"}).splitsEveryDot());
    EXPECT_TRUE(KeyPath::fromParts("a.b", std::vector<std::string>{}).splitsEveryDot());
}

TEST(KeyPath, ComponentsWithDots)
{
    const std::vector<std::string> parts = {"model", "module.decoder.layers.0.weight"};
    const std::string key = "model.module.decoder.layers.0.weight";
    EXPECT_FALSE(KeyPath::fromParts(key, parts).splitsEveryDot());
    EXPECT_EQ(roundTrip(key, parts), parts);
    EXPECT_EQ(roundTrip("a..b", {"a.", "b"}), (std::vector<std::string>{"a.", "b"}));
    EXPECT_EQ(roundTrip("a..b", {"a", "", "b"}), (std::vector<std::string>{"a", "", "b"}));
    EXPECT_EQ(roundTrip("rng.(0, 0).3", {"rng", "(0, 0)", "3"}),
              (std::vector<std::string>{"rng", "(0, 0)", "3"}));
}

TEST(KeyPath, PartsThatAreNotTheKeyAreKept)
{
    EXPECT_EQ(roundTrip("a.b", {"x", "y"}), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(roundTrip("a.b", {"a", "b", "c"}), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(roundTrip("a.bc", {"a", "b"}), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(roundTrip("ab", {"a", "b"}), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(roundTrip("a", {"abc"}), (std::vector<std::string>{"abc"}));
}

TEST(KeyPath, ManyDots)
{
    // Past the 64th dot only "separates" can be kept compactly; the rest stay explicit.
    const std::string key = dots(80);
    std::vector<std::string> every(81, "p");
    EXPECT_TRUE(KeyPath::fromParts(key, every).splitsEveryDot());
    EXPECT_EQ(roundTrip(key, every), every);
    const std::vector<std::string> twoLate = {dots(70), dots(9)};
    EXPECT_EQ(roundTrip(key, twoLate), twoLate);
    const std::vector<std::string> twoEarly = {dots(3), dots(76)};
    EXPECT_EQ(roundTrip(key, twoEarly), twoEarly);
}
