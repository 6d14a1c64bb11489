// SPDX-License-Identifier: MIT
// The entries' compact containers: a view is shared by its copies, every change makes the
// elements the changer's own first, and both behave as std::vector and std::string do.
#include "shardscope/compact.h"

#include <gtest/gtest.h>

#include <map>
#include <unordered_set>

using namespace shardscope;

TEST(CompactVector, ChangesToAViewLeaveItsBytesAlone)
{
    static const int64_t bytes[] = {1, 2, 3, 4};
    const auto v = CompactVector<int64_t>::view(bytes, 4);
    EXPECT_FALSE(v.owns());
    CompactVector<int64_t> copy = v; // a view too: the bytes live as long as the process
    EXPECT_FALSE(copy.owns());
    EXPECT_EQ(copy.data(), bytes);

    CompactVector<int64_t> edited = v;
    edited.edit()[1] = 20;
    EXPECT_TRUE(edited.owns());
    EXPECT_EQ(edited, (std::vector<int64_t>{1, 20, 3, 4}));
    EXPECT_EQ(bytes[1], 2);

    CompactVector<int64_t> grown = v;
    grown.push_back(5);
    grown.append(grown); // from itself: copied before the buffer moves
    EXPECT_EQ(grown, (std::vector<int64_t>{1, 2, 3, 4, 5, 1, 2, 3, 4, 5}));
    CompactVector<int64_t> shrunk = v;
    shrunk.pop_back();
    shrunk.insert(shrunk.begin() + 1, bytes + 2, bytes + 4);
    EXPECT_EQ(shrunk, (std::vector<int64_t>{1, 3, 4, 2, 3}));
    CompactVector<int64_t> self = v; // from itself, into the middle
    self.insert(self.begin() + 1, self.begin(), self.end());
    EXPECT_EQ(self, (std::vector<int64_t>{1, 1, 2, 3, 4, 2, 3, 4}));
    CompactVector<int64_t> cleared = v;
    cleared.clear();
    EXPECT_TRUE(cleared.empty());
    EXPECT_EQ(v, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(CompactVector, BehavesAsAVector)
{
    CompactVector<int64_t> v{3, 1, 2};
    std::vector<int64_t> same(v);
    EXPECT_EQ(same, (std::vector<int64_t>{3, 1, 2}));
    EXPECT_EQ(v, same);
    EXPECT_EQ(same, v);
    v.resize(5, 7);
    v.assign(size_t(2), int64_t(9));
    EXPECT_EQ(v, (std::vector<int64_t>{9, 9}));
    CompactVector<int64_t> moved = std::move(v);
    EXPECT_TRUE(v.empty());
    EXPECT_EQ(moved.size(), 2u);
    const std::span<const int64_t> s = moved;
    EXPECT_EQ(s.size(), 2u);
    for (int i = 0; i < 1000; ++i)
        moved.emplace_back(i);
    EXPECT_EQ(moved.size(), 1002u);
    EXPECT_EQ(moved.back(), 999);
    EXPECT_TRUE(CompactVector<int64_t>().owns());
}

TEST(CompactString, AViewIsAStringUntilChanged)
{
    static const char bytes[] = "decoder.layers.0.mlp\0";
    const auto s = CompactString::view(bytes, 20);
    EXPECT_FALSE(s.owns());
    EXPECT_STREQ(s.c_str(), "decoder.layers.0.mlp");
    EXPECT_TRUE(s.starts_with("decoder."));
    EXPECT_EQ(s.substr(8, 6), "layers");
    EXPECT_EQ(s.rfind('.'), 16u);
    CompactString t = s;
    t += ".linear_fc1";
    EXPECT_TRUE(t.owns());
    EXPECT_EQ(t, "decoder.layers.0.mlp.linear_fc1");
    EXPECT_STREQ(t.c_str(), "decoder.layers.0.mlp.linear_fc1");
    EXPECT_EQ(s, std::string("decoder.layers.0.mlp"));
    CompactString reserved = s;
    reserved.reserve(3); // less than it holds: all of it is still copied
    EXPECT_TRUE(reserved.owns());
    EXPECT_EQ(reserved, s);
    EXPECT_EQ(reserved[reserved.size()], '\0');
    EXPECT_EQ(std::string(s) + "!", "decoder.layers.0.mlp!");
    EXPECT_EQ("[" + s + "]", "[decoder.layers.0.mlp]");
}

TEST(CompactString, OrdersHashesAndConvertsAsAString)
{
    const CompactString a = "alpha", b = std::string("beta");
    EXPECT_LT(a, b);
    EXPECT_LT(a, std::string("alphabet"));
    EXPECT_GT(std::string_view("gamma"), b);
    std::map<std::string, int> m{{"alpha", 1}};
    EXPECT_EQ(m[a.str()], 1);
    std::unordered_set<CompactString> set{a, b, "alpha"};
    EXPECT_EQ(set.size(), 2u);
    std::string s(a); // explicit: a std::string is a copy
    s = b;            // assigned through std::string_view
    EXPECT_EQ(s, "beta");
    const std::string_view v = a;
    EXPECT_EQ(v, "alpha");
    CompactString empty;
    EXPECT_STREQ(empty.c_str(), "");
    EXPECT_EQ(empty[0], '\0');
    EXPECT_TRUE(empty.empty());
}
