// SPDX-License-Identifier: MIT
// The verification's own failure paths: a plan that reads the wrong rows must come out as a
// mismatch, counted element by element, with the first differing index and the rank whose split
// piece differs; the healthy plan of the same checkpoint comes out bit-identical. Checking on
// several threads gives exactly the result of one, cancels cleanly and reports errors in order.
#include "testenv.h"

#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>
#include <shardscope/layout.h>
#include <shardscope/loadplan.h>
#include <shardscope/verify.h>

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <filesystem>
#include <thread>

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

std::optional<Run> demo(std::vector<std::string> disabledRules = {}, int tp = 1)
{
    const fs::path dir = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
    auto index = openCheckpoint(dir.string());
    LayoutOptions o;
    o.parallel.dpShard = 2;
    o.parallel.tp = tp;
    auto layout = layoutFromConfig((dir / "config.json").string(), o);
    if (!index || !layout)
        return std::nullopt;
    DiffOptions diffOptions;
    diffOptions.disabledRules = std::move(disabledRules);
    auto diff = diffAgainstLayout(*index, *layout, diffOptions);
    if (!diff)
        return std::nullopt;
    auto plan = planLoad(*layout, *diff);
    if (!plan)
        return std::nullopt;
    return Run{std::move(*index), std::move(*layout), std::move(*diff), std::move(*plan)};
}

// Rank 1's first read of a parameter of several rows starts one row early: it fills its shard
// with its neighbour's rows.
ShardRead *shiftOneRead(LoadPlan &plan)
{
    for (ShardRead &r : plan.ranks[1].reads)
        if (!r.sizes.empty() && r.offsets[0] > 0 && r.sizes[0] > 1) {
            r.offsets[0] -= 1;
            return &r;
        }
    return nullptr;
}

void expectSameCheck(const ParamCheck &a, const ParamCheck &b)
{
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.outcome, b.outcome);
    EXPECT_EQ(a.mismatches, b.mismatches);
    EXPECT_EQ(a.firstMismatch, b.firstMismatch);
    EXPECT_EQ(a.roundTrip, b.roundTrip);
    EXPECT_EQ(a.sourced, b.sourced);
    EXPECT_EQ(a.ranksHolding, b.ranksHolding);
    EXPECT_EQ(a.note, b.note);
    EXPECT_EQ(a.sha256, b.sha256);
    EXPECT_EQ(a.fingerprint, b.fingerprint);
    EXPECT_EQ(a.health.count, b.health.count);
    EXPECT_EQ(a.health.nanCount, b.health.nanCount);
    EXPECT_EQ(std::bit_cast<uint64_t>(a.health.mean), std::bit_cast<uint64_t>(b.health.mean));
    EXPECT_EQ(std::bit_cast<uint64_t>(a.health.std), std::bit_cast<uint64_t>(b.health.std));
    EXPECT_EQ(std::bit_cast<uint64_t>(a.health.l2), std::bit_cast<uint64_t>(b.health.l2));
    EXPECT_EQ(a.health.histogram, b.health.histogram);
}

} // namespace

TEST(VerifyLoad, ThreadsGiveExactlyTheResultOfOne)
{
    // Clean, with a mismatch, and with the MLA rule off (parameters kept at their initial
    // values); whole and with a budget small enough to stream, which takes threads away.
    for (int variant = 0; variant < 3; ++variant) {
        auto run = variant == 2 ? demo({"mla_down_proj"}) : demo();
        ASSERT_TRUE(run);
        if (variant == 1) {
            ASSERT_NE(shiftOneRead(run->plan), nullptr);
        }
        for (uint64_t budget : {uint64_t(0), uint64_t(60000)}) {
            SCOPED_TRACE("variant " + std::to_string(variant) + ", budget " +
                         std::to_string(budget));
            std::optional<VerifyResult> one;
            for (int threads : {1, 2, 5}) {
                VerifyOptions options;
                options.maxMemory = budget;
                options.hash = true;
                options.threads = threads;
                auto r = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
                ASSERT_TRUE(r.ok()) << r.error().toString();
                EXPECT_EQ(r->threads, budget ? 1 : threads);
                if (!one) {
                    one = std::move(*r);
                    EXPECT_EQ(one->mismatched, variant == 1 ? 1u : 0u);
                    EXPECT_EQ(one->keptInitial > 0, variant == 2);
                    continue;
                }
                EXPECT_EQ(r->checked, one->checked);
                EXPECT_EQ(r->identical, one->identical);
                EXPECT_EQ(r->mismatched, one->mismatched);
                EXPECT_EQ(r->keptInitial, one->keptInitial);
                EXPECT_EQ(r->roundTripFailures, one->roundTripFailures);
                EXPECT_EQ(r->bytesRead, one->bytesRead);
                ASSERT_EQ(r->params.size(), one->params.size());
                for (size_t i = 0; i < r->params.size(); ++i)
                    expectSameCheck(r->params[i], one->params[i]);
            }
        }
    }
}

TEST(VerifyLoad, CancelStopsEveryThread)
{
    auto run = demo();
    ASSERT_TRUE(run);
    const auto whole = verifyLoad(run->index, run->layout, run->diff, run->plan);
    ASSERT_TRUE(whole.ok());
    for (int threads : {1, 4}) {
        std::atomic<int> calls{0};
        uint64_t last = 0;
        bool backwards = false;
        VerifyOptions options;
        options.threads = threads;
        options.progress = [&](uint64_t done, uint64_t) {
            backwards = backwards || done < last;
            last = done;
            // Slow, so that the other threads queue behind the call that says stop.
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return ++calls < 3;
        };
        auto r = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
        ASSERT_TRUE(r.ok()) << r.error().toString();
        EXPECT_TRUE(r->cancelled);
        EXPECT_EQ(calls, 3); // no thread asks again once one has been told to stop
        EXPECT_FALSE(backwards);
        EXPECT_GE(r->params.size(), 2u); // the parameter told to stop is not reported
        EXPECT_LT(r->params.size(), whole->params.size()) << threads << " threads";
    }
}

TEST(VerifyLoad, ProgressComesWithEveryWindow)
{
    // A parameter that streams reports progress window by window (and can be stopped within
    // it), not only once it is done.
    auto run = demo();
    ASSERT_TRUE(run);
    int calls = 0;
    VerifyOptions options;
    options.maxMemory = 60000;
    options.progress = [&](uint64_t, uint64_t) { return ++calls > 0; };
    auto r = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
    ASSERT_TRUE(r.ok()) << r.error().toString();
    // What was read (buffers are named, not checked: they report no progress).
    std::vector<ParamCheck> read;
    for (const ParamCheck &c : r->params)
        if (c.outcome != ParamCheck::Outcome::NotChecked)
            read.push_back(c);
    size_t windows = 0; // read: twice for a streamed one (its histogram's pass)
    for (const ParamCheck &c : read) {
        const auto at = c.note.find("streamed in ");
        windows += at == std::string::npos ? 1 : 2 * std::stoul(c.note.substr(at + 12));
    }
    ASSERT_GT(windows, read.size()); // something streamed
    EXPECT_EQ(size_t(calls), windows);

    // Told to stop in the first streamed parameter's second window: nothing after it is read.
    calls = 0;
    size_t first = 0;
    while (read[first].note.find("streamed") == std::string::npos)
        ++first;
    const int stopAt = int(first) + 2;
    options.progress = [&](uint64_t, uint64_t) { return ++calls < stopAt; };
    auto stopped = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
    ASSERT_TRUE(stopped.ok());
    EXPECT_TRUE(stopped->cancelled);
    EXPECT_EQ(calls, stopAt);
    EXPECT_EQ(stopped->params.size(), first);
}

TEST(VerifyLoad, ProgressEndsAtTheTotal)
{
    // Row-parallel shards count their columns only, and parameters too big for the budget count
    // as done: the bar ends full, never past it.
    for (int tp : {1, 2})
        for (uint64_t budget : {uint64_t(0), uint64_t(60000), uint64_t(20000)})
            for (int threads : {1, 2}) {
                auto run = demo({}, tp);
                ASSERT_TRUE(run);
                uint64_t last = 0, total = 0, over = 0;
                VerifyOptions options;
                options.maxMemory = budget;
                options.threads = threads;
                options.progress = [&](uint64_t done, uint64_t all) {
                    last = done;
                    total = all;
                    over += done > all;
                    return true;
                };
                auto r = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
                ASSERT_TRUE(r.ok()) << r.error().toString();
                size_t skipped = 0;
                for (const ParamCheck &c : r->params)
                    skipped += c.outcome == ParamCheck::Outcome::Skipped;
                EXPECT_EQ(skipped > 0, budget == 20000) << "tp " << tp << ", budget " << budget;
                EXPECT_GT(total, 0u);
                EXPECT_EQ(last, total) << "tp " << tp << ", budget " << budget;
                EXPECT_EQ(over, 0u);
            }
}

TEST(VerifyLoad, TheFirstParametersErrorIsTheOneReported)
{
    auto run = demo();
    ASSERT_TRUE(run);
    // The first parameter fails late, on its direct read (a source the checkpoint lacks); every
    // later one early, on a planned read of rank 0. Whatever the timing, the first parameter's
    // error is the one that comes back.
    uint32_t firstParam = UINT32_MAX;
    for (const ShardRead &r : run->plan.ranks[0].reads)
        firstParam = std::min(firstParam, r.param);
    ASSERT_NE(firstParam, UINT32_MAX);
    std::string first;
    for (DiffEntry &e : run->diff.entries)
        if (e.section == Section::Model && e.param == run->layout.params[firstParam].name) {
            ASSERT_FALSE(e.sources.empty());
            e.sources.front().key += ".gone";
            first = e.sources.front().key;
        }
    ASSERT_FALSE(first.empty());
    for (ShardRead &r : run->plan.ranks[0].reads)
        if (r.param != firstParam)
            r.key += ".gone";
    for (int attempt = 0; attempt < 5; ++attempt) {
        for (int threads : {1, 3}) {
            VerifyOptions options;
            options.threads = threads;
            auto r = verifyLoad(run->index, run->layout, run->diff, run->plan, options);
            ASSERT_FALSE(r.ok());
            EXPECT_EQ(r.error().key, first) << r.error().toString();
        }
    }
}

TEST(VerifyLoad, ShiftedReadIsAMismatch)
{
    auto run = demo();
    ASSERT_TRUE(run);
    auto clean = verifyLoad(run->index, run->layout, run->diff, run->plan);
    ASSERT_TRUE(clean.ok()) << clean.error().toString();
    EXPECT_TRUE(clean->clean());
    EXPECT_EQ(clean->identical, clean->checked);

    const ShardRead *bad = shiftOneRead(run->plan);
    ASSERT_NE(bad, nullptr);
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
