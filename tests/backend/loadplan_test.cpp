// SPDX-License-Identifier: MIT
// The load planner against the bundled demo, which real torch wrote over 2 ranks with
// Megatron-FSDP's flat, row-aligned shards (tools/make_demo.py): the planned boxes of every
// stored model key must be exactly the chunks torch wrote.
#include "testenv.h"

#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>
#include <shardscope/layout.h>
#include <shardscope/loadplan.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

struct Demo
{
    CheckpointIndex index;
    Layout layout;
    DiffResult diff;
};

std::optional<Demo> openDemo(int world)
{
    const fs::path demo = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
    auto index = openCheckpoint(demo.string());
    if (!index)
        return std::nullopt;
    LayoutOptions o;
    o.parallel.dpShard = world;
    auto layout = layoutFromConfig((demo / "config.json").string(), o);
    if (!layout)
        return std::nullopt;
    auto diff = diffAgainstLayout(*index, *layout, {});
    if (!diff)
        return std::nullopt;
    return Demo{std::move(*index), std::move(*layout), std::move(*diff)};
}

using Boxes = std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>>;

} // namespace

TEST(LoadPlan, DemoChunksAreThePlannedShards)
{
    auto demo = openDemo(2);
    ASSERT_TRUE(demo);
    ASSERT_TRUE(demo->diff.clean());
    auto plan = planLoad(demo->layout, demo->diff);
    ASSERT_TRUE(plan.ok()) << plan.error().toString();
    ASSERT_EQ(plan->ranks.size(), 2u);

    std::map<std::string, Boxes> planned;
    for (const RankPlan &r : plan->ranks) {
        EXPECT_TRUE(r.unloadable.empty());
        for (const ShardRead &read : r.reads)
            EXPECT_TRUE(planned[read.key].insert({read.offsets, read.sizes}).second)
                << read.key << ": two ranks read the same box";
    }
    size_t keys = 0;
    for (const TensorEntry &t : demo->index.tensors) {
        if (!t.key.starts_with("model.module."))
            continue;
        Boxes stored;
        for (size_t c = 0; c < t.chunks.size(); ++c)
            stored.insert({std::vector<int64_t>(t.chunkOffsets(c).begin(), t.chunkOffsets(c).end()),
                           std::vector<int64_t>(t.chunkSizes(c).begin(), t.chunkSizes(c).end())});
        if (t.key.ends_with("router.expert_bias")) // a buffer: written whole, not FSDP-sharded
            continue;
        EXPECT_EQ(planned[t.key], stored) << t.key;
        ++keys;
    }
    EXPECT_GT(keys, 100u);
}

// Resharding to another world size: each parameter is covered exactly once, row-aligned.
TEST(LoadPlan, ShardsPartitionEveryParameter)
{
    for (int world : {1, 2, 3, 4, 8}) {
        auto demo = openDemo(world);
        ASSERT_TRUE(demo);
        auto plan = planLoad(demo->layout, demo->diff);
        ASSERT_TRUE(plan.ok()) << plan.error().toString();
        std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> slices;
        for (const RankPlan &r : plan->ranks)
            for (const ParamShard &s : r.shards) {
                EXPECT_EQ(s.flatBegin % s.rowSize, 0);
                EXPECT_EQ(s.flatEnd % s.rowSize, 0);
                if (s.flatEnd > s.flatBegin)
                    slices[s.param].push_back({s.flatBegin, s.flatEnd});
            }
        for (auto &[param, v] : slices) {
            std::sort(v.begin(), v.end());
            int64_t at = 0;
            for (auto [a, b] : v) {
                EXPECT_EQ(a, at) << demo->layout.params[param].name << " world " << world;
                at = b;
            }
            int64_t numel = 1;
            for (int64_t d : demo->layout.params[param].shape)
                numel *= d;
            EXPECT_EQ(at, numel) << demo->layout.params[param].name << " world " << world;
        }
    }
}

// The MLA handler disabled: the fused parameters' shards have no source, on every rank that
// holds a piece of them.
TEST(LoadPlan, UnloadableShardsAreNamed)
{
    auto demo = openDemo(2);
    ASSERT_TRUE(demo);
    DiffOptions o;
    o.disabledRules = {"mla_down_proj"};
    auto diff = diffAgainstLayout(demo->index, demo->layout, o);
    ASSERT_TRUE(diff.ok());
    auto plan = planLoad(demo->layout, *diff);
    ASSERT_TRUE(plan.ok());
    std::set<std::string> unloadable, want;
    for (const RankPlan &r : plan->ranks)
        for (uint32_t p : r.unloadable)
            unloadable.insert(demo->layout.params[p].name);
    for (const DiffEntry &e : diff->entries)
        if (e.section == Section::Model && !e.realLoadFills)
            want.insert(e.param);
    EXPECT_EQ(unloadable, want);
    EXPECT_FALSE(want.empty());
}
