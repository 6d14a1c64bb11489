// SPDX-License-Identifier: MIT
// The diff evaluates parameters on several threads (DiffOptions::threads): the result must be
// the one-thread result, byte for byte, for every checkpoint real torch wrote for the layout
// tests and the bundled demo, with every rule on and with each rule off; and a cancel must stop
// every thread.
#include "testenv.h"

#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>
#include <shardscope/layout.h>
#include <shardscope/report.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <utility>

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

struct Case
{
    fs::path checkpoint, config;
};

std::vector<Case> cases()
{
    std::vector<Case> out;
    const fs::path demo = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
    out.push_back({demo, demo / "config.json"});
    const fs::path layouts = fs::path(fixturesDir()) / ".." / "layout-fixtures";
    std::ifstream in(layouts / "MANIFEST.json");
    if (!in)
        return out;
    const auto manifest = nlohmann::json::parse(in, nullptr, false);
    if (manifest.is_discarded())
        return out;
    for (const auto &c : manifest["checkpoints"])
        out.push_back(
            {layouts / c["path"].get<std::string>(), layouts / c["config"].get<std::string>()});
    return out;
}

// A case's checkpoint opened, and the layout of its config.
Result<std::pair<CheckpointIndex, Layout>> openCase(const Case &c)
{
    auto index = openCheckpoint(c.checkpoint.string());
    if (!index)
        return index.error();
    auto layout = layoutFromConfig(c.config.string(), {});
    if (!layout)
        return layout.error();
    return std::pair{std::move(*index), std::move(*layout)};
}

std::string diffJson(const CheckpointIndex &index, const Layout &layout, DiffOptions options,
                     int threads)
{
    options.threads = threads;
    auto diff = diffAgainstLayout(index, layout, options);
    return diff ? diffToJson(*diff) : "error: " + diff.error().toString();
}

} // namespace

TEST(DiffThreads, SameResultOnAnyNumberOfThreads)
{
    const auto all = cases();
    if (all.size() < 2)
        GTEST_SKIP() << "layout fixtures not generated (run through ctest)";
    int diffs = 0;
    for (const Case &c : all) {
        SCOPED_TRACE(c.checkpoint.string());
        auto opened = openCase(c);
        ASSERT_TRUE(opened.ok()) << opened.error().toString();
        const auto &[index, layout] = *opened;
        std::vector<std::vector<std::string>> ruleSets = {{}};
        for (const RuleInfo &r : allRules())
            ruleSets.push_back({r.name});
        for (const auto &disabled : ruleSets) {
            SCOPED_TRACE(disabled.empty() ? "all rules" : "without " + disabled.front());
            DiffOptions options;
            options.disabledRules = disabled;
            const std::string one = diffJson(index, layout, options, 1);
            ASSERT_FALSE(one.starts_with("error")) << one;
            // Blocks shrink with the layout: a small one is still split between 3 threads.
            EXPECT_EQ(diffJson(index, layout, options, 3), one);
            ++diffs;
        }
    }
    EXPECT_GE(diffs, 50);
}

TEST(DiffThreads, CancelStopsEveryThread)
{
    const fs::path demo = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
    auto index = openCheckpoint(demo.string());
    ASSERT_TRUE(index.ok());
    auto layout = layoutFromConfig((demo / "config.json").string(), {});
    ASSERT_TRUE(layout.ok());
    DiffOptions options;
    options.threads = 4;
    std::atomic<int> calls{0};
    auto diff = diffAgainstLayout(*index, *layout, options, [&](uint64_t, uint64_t) {
        ++calls;
        return false;
    });
    ASSERT_FALSE(diff.ok());
    EXPECT_EQ(diff.error().code, Error::Code::Cancelled);
    EXPECT_EQ(calls.load(), 1);
}

// Every key the diff names carries its item in the index (DiffSource::entry and the like): the
// GUI marks the tree by item. An item named must be the key's; a key that is an item must say so.
TEST(DiffThreads, KeysNameTheirItemsInTheIndex)
{
    const auto all = cases();
    if (all.size() < 2)
        GTEST_SKIP() << "layout fixtures not generated (run through ctest)";
    size_t named = 0;
    for (const Case &c : all) {
        SCOPED_TRACE(c.checkpoint.string());
        auto opened = openCase(c);
        ASSERT_TRUE(opened.ok()) << opened.error().toString();
        const auto &[index, layout] = *opened;
        std::set<std::string_view> items;
        for (size_t i = 0; i < index.itemCount(); ++i)
            items.insert(index.itemKey(i));
        auto check = [&](const std::string &key, int64_t entry) {
            if (entry >= 0) {
                ASSERT_LT(size_t(entry), index.itemCount());
                EXPECT_EQ(index.itemKey(size_t(entry)), key);
                ++named;
            } else {
                EXPECT_EQ(items.count(key), 0u) << key << " is an item, named as none";
            }
        };
        for (const char *rule : {"", "mla_down_proj", "swiglu", "gdn"}) {
            SCOPED_TRACE(rule);
            DiffOptions options;
            if (*rule)
                options.disabledRules = {rule};
            auto diff = diffAgainstLayout(index, layout, options);
            ASSERT_TRUE(diff.ok()) << diff.error().toString();
            for (const DiffEntry &e : diff->entries) {
                for (const DiffSource &s : e.sources)
                    check(s.key, s.entry);
                ASSERT_EQ(e.unreadEntries.size(), e.unreadKeys.size());
                for (size_t i = 0; i < e.unreadKeys.size(); ++i)
                    check(e.unreadKeys[i], e.unreadEntries[i]);
            }
            for (const UnconsumedKey &u : diff->unconsumed)
                check(u.key, u.entry);
        }
    }
    EXPECT_GT(named, 1000u);
}

// A shared index keeps its sorted keys between diffs (the window's rule toggles): every diff of
// it, rules toggled one after another in both directions, must be the diff of a fresh index.
TEST(DiffThreads, SharedIndexDiffsAgainAsFresh)
{
    const auto all = cases();
    if (all.size() < 2)
        GTEST_SKIP() << "layout fixtures not generated (run through ctest)";
    int diffs = 0;
    for (const Case &c : all) {
        SCOPED_TRACE(c.checkpoint.string());
        auto opened = openCase(c);
        ASSERT_TRUE(opened.ok()) << opened.error().toString();
        auto &[index, layout] = *opened;
        const std::string fresh = diffJson(index, layout, {}, 0);
        const auto shared = std::make_shared<const CheckpointIndex>(std::move(index));
        auto again = [&](const DiffOptions &options) {
            auto diff = diffAgainstLayout(shared, layout, options);
            return diff ? diffToJson(*diff) : "error: " + diff.error().toString();
        };
        for (const RuleInfo &r : allRules()) {
            SCOPED_TRACE("without " + r.name);
            DiffOptions options;
            options.disabledRules = {r.name};
            EXPECT_EQ(again(options), diffJson(*shared, layout, options, 0));
            // Back on: what the rule-less run marked must not stay marked.
            EXPECT_EQ(again({}), fresh);
            diffs += 2;
        }
    }
    EXPECT_GE(diffs, 100);
}
