// SPDX-License-Identifier: MIT
// The verification's own failure paths: a plan that reads the wrong rows must come out as a
// mismatch, counted element by element, with the first differing index and the rank whose split
// piece differs; the healthy plan of the same checkpoint comes out bit-identical.
#include "testenv.h"

#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>
#include <shardscope/layout.h>
#include <shardscope/loadplan.h>
#include <shardscope/verify.h>

#include <gtest/gtest.h>

#include <filesystem>

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

struct Run
{
    CheckpointIndex index;
    Layout layout;
    DiffResult diff;
    LoadPlan plan;
};

std::optional<Run> demo()
{
    const fs::path dir = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
    auto index = openCheckpoint(dir.string());
    LayoutOptions o;
    o.parallel.dpShard = 2;
    auto layout = layoutFromConfig((dir / "config.json").string(), o);
    if (!index || !layout)
        return std::nullopt;
    auto diff = diffAgainstLayout(*index, *layout, {});
    if (!diff)
        return std::nullopt;
    auto plan = planLoad(*layout, *diff);
    if (!plan)
        return std::nullopt;
    return Run{std::move(*index), std::move(*layout), std::move(*diff), std::move(*plan)};
}

} // namespace

TEST(VerifyLoad, ShiftedReadIsAMismatch)
{
    auto run = demo();
    ASSERT_TRUE(run);
    auto clean = verifyLoad(run->index, run->layout, run->diff, run->plan);
    ASSERT_TRUE(clean.ok()) << clean.error().toString();
    EXPECT_TRUE(clean->clean());
    EXPECT_EQ(clean->identical, clean->checked);

    // Rank 1's first read of a parameter of several rows starts one row early: it fills its
    // shard with its neighbour's rows.
    ShardRead *bad = nullptr;
    for (ShardRead &r : run->plan.ranks[1].reads)
        if (!r.sizes.empty() && r.offsets[0] > 0 && r.sizes[0] > 1) {
            bad = &r;
            break;
        }
    ASSERT_NE(bad, nullptr);
    bad->offsets[0] -= 1;
    const LayoutParam &p = run->layout.params[bad->param];
    int64_t row = 1;
    for (size_t d = 1; d < p.shape.size(); ++d)
        row *= p.shape[d];

    for (uint64_t budget : {uint64_t(0), uint64_t(60000)}) { // whole, and streamed in windows
        VerifyOptions options;
        options.maxMemory = budget;
        auto r = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
        ASSERT_TRUE(r.ok()) << r.error().toString();
        EXPECT_FALSE(r->clean());
        EXPECT_EQ(r->mismatched, 1u);
        const ParamCheck *c = nullptr;
        for (const ParamCheck &x : r->params)
            if (x.name == p.name)
                c = &x;
        ASSERT_NE(c, nullptr);
        EXPECT_EQ(c->outcome, ParamCheck::Outcome::Mismatch);
        EXPECT_EQ(c->firstMismatch, bad->paramRow * row) << "budget " << budget;
        EXPECT_GT(c->mismatches, 0u);
        EXPECT_LE(c->mismatches, uint64_t(bad->sizes[0] * row));
        EXPECT_FALSE(c->roundTrip);
        EXPECT_NE(c->note.find("rank 1"), std::string::npos) << c->note;
        EXPECT_EQ(c->note.find("streamed") != std::string::npos, budget != 0) << c->note;
    }
}
