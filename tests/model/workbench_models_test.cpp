// SPDX-License-Identifier: MIT
// The workbench's model layer: load marks in the tree, the verification and comparison tables,
// the shard map, layer families and the reproduce commands.
#include "testutil.h"

#include "model/changelistmodel.h"
#include "model/checkpointfilterproxy.h"
#include "model/checkpointtreemodel.h"
#include "model/layerfamily.h"
#include "model/loadmarks.h"
#include "model/reprocommand.h"
#include "model/shardmap.h"
#include "model/valuediffmodel.h"
#include "model/verifytablemodel.h"

#include <QAbstractItemModelTester>
#include <shardscope/diff.h>
#include <shardscope/layout.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

using namespace shardscope;
using namespace shardscope::model;
using namespace shardscope::model::test;

namespace {

DiffEntry entry(std::string name, LoadStatus status, std::vector<std::string> keys,
                bool fills = true)
{
    DiffEntry e;
    e.name = e.param = std::move(name);
    e.status = status;
    e.realLoadFills = fills;
    for (std::string &k : keys) {
        DiffSource s;
        s.key = std::move(k);
        e.sources.push_back(s);
    }
    return e;
}

LoadMark markOf(const std::shared_ptr<const LoadMarkSet> &set, const std::string &key)
{
    for (const KeyMark &m : set->marks)
        if (m.key == key)
            return m.mark;
    return LoadMark::None;
}

QString whyOf(const std::shared_ptr<const LoadMarkSet> &set, const std::string &key)
{
    for (const KeyMark &m : set->marks)
        if (m.key == key)
            return describe(m);
    return {};
}

// embed loads; layers.0.attn feeds a parameter that loads and one with the wrong shape (the
// worse wins); layers.0.mlp holds the data of a parameter the load does not read (kept at init);
// layers.1.attn is read by nothing.
std::shared_ptr<DiffResult> makeDiff()
{
    auto d = std::make_shared<DiffResult>();
    d->entries.push_back(entry("embed.weight", LoadStatus::Ok, {"model.embed.weight"}));
    d->entries.push_back(entry("attn.a", LoadStatus::Merge, {"model.layers.0.attn.weight"}));
    d->entries.push_back(
        entry("attn.b", LoadStatus::ShapeMismatch, {"model.layers.0.attn.weight"}));
    DiffEntry fused = entry("mlp.fused", LoadStatus::Unloadable, {}, false);
    fused.unreadKeys = {"model.layers.0.mlp.weight"};
    d->entries.push_back(fused);
    d->outcome.keptAtInit = {"mlp.fused"};
    UnconsumedKey u;
    u.key = "model.layers.1.attn.weight";
    d->unconsumed.push_back(u);
    return d;
}

} // namespace

TEST(LoadMarksTest, EachKeyTakesTheWorstOfWhatTheLoadDoesWithIt)
{
    const auto diff = makeDiff();
    const auto marks = loadMarks(diff, nullptr);
    EXPECT_EQ(markOf(marks, "model.embed.weight"), LoadMark::Loaded);
    EXPECT_EQ(markOf(marks, "model.layers.0.attn.weight"), LoadMark::Problem);
    EXPECT_EQ(markOf(marks, "model.layers.0.mlp.weight"), LoadMark::KeptAtInit);
    EXPECT_EQ(markOf(marks, "model.layers.1.attn.weight"), LoadMark::Unconsumed);
    EXPECT_TRUE(loadMarks(nullptr, nullptr)->marks.empty());
    EXPECT_TRUE(
        whyOf(marks, "model.layers.0.mlp.weight").startsWith(QStringLiteral("mlp.fused: ")));
    EXPECT_TRUE(whyOf(marks, "model.layers.0.mlp.weight").contains(QStringLiteral("initial")));

    // A verification replaces "loads" with what it found, and never hides a problem.
    auto report = std::make_shared<VerifyReport>();
    ParamCheck ok;
    ok.name = "embed.weight";
    ParamCheck bad;
    bad.name = "attn.a";
    bad.outcome = ParamCheck::Outcome::Identical;
    report->result.params = {ok, bad};
    auto verified = loadMarks(diff, report);
    EXPECT_EQ(markOf(verified, "model.embed.weight"), LoadMark::Verified);
    EXPECT_EQ(markOf(verified, "model.layers.0.attn.weight"), LoadMark::Problem);
    report->result.params[0].outcome = ParamCheck::Outcome::Mismatch;
    verified = loadMarks(diff, report);
    EXPECT_EQ(markOf(verified, "model.embed.weight"), LoadMark::Mismatch);
}

// The tree marks what the status bar and the reports count (shardscope::isLoadProblem): a cast
// that may change values is a problem; a widening one, or one measured over every element to
// change none, is not; one measured in part is still a problem.
TEST(LoadMarksTest, ACastIsMarkedAsTheProblemCountsCountIt)
{
    auto d = std::make_shared<DiffResult>();
    d->entries.push_back(entry("widening", LoadStatus::Cast, {"k.widening"}));
    DiffEntry narrowing = entry("narrowing", LoadStatus::Cast, {"k.narrowing"});
    narrowing.narrowing = true;
    narrowing.shape = {4, 2};
    d->entries.push_back(narrowing);
    DiffEntry measured = narrowing;
    measured.name = measured.param = "measured";
    measured.sources[0].key = "k.measured";
    measured.castLoss.emplace().count = 8;
    d->entries.push_back(measured);
    DiffEntry partly = measured;
    partly.name = partly.param = "partly";
    partly.sources[0].key = "k.partly";
    partly.castLoss->count = 4;
    d->entries.push_back(partly);
    const auto marks = loadMarks(d, nullptr);
    const std::map<std::string, LoadMark> want = {{"k.widening", LoadMark::Loaded},
                                                  {"k.narrowing", LoadMark::Problem},
                                                  {"k.measured", LoadMark::Loaded},
                                                  {"k.partly", LoadMark::Problem}};
    for (const DiffEntry &e : d->entries) {
        const std::string &key = e.sources[0].key;
        EXPECT_EQ(markOf(marks, key), want.at(key)) << key;
        EXPECT_EQ(markOf(marks, key) == LoadMark::Problem, isLoadProblem(e)) << key;
    }
}

TEST(LoadMarksTest, TheTreeShowsThemAndProblemsOnlyKeepsThem)
{
    CheckpointTreeModel tree;
    QAbstractItemModelTester tester(&tree, QAbstractItemModelTester::FailureReportingMode::Fatal);
    CheckpointFilterProxy proxy;
    proxy.setSourceModel(&tree);
    QAbstractItemModelTester proxyTester(&proxy,
                                         QAbstractItemModelTester::FailureReportingMode::Fatal);
    tree.setIndex(makeSmallIndex());
    const auto diff = makeDiff();
    tree.setLoadMarks(loadMarks(diff, nullptr));
    auto markAt = [&](const char *key) {
        return LoadMark(tree.indexForKey(QString::fromLatin1(key)).data(LoadMarkRole).toInt());
    };
    EXPECT_EQ(markAt("model.layers.0.mlp.weight"), LoadMark::KeptAtInit);
    EXPECT_EQ(markAt("model.norm"), LoadMark::None);
    EXPECT_EQ(tree.markedLeaves(LoadMark::KeptAtInit), 1u);
    // The group above shows its worst mark and how many leaves carry it.
    const QModelIndex layer0 =
        tree.indexForKey(QStringLiteral("model.layers.0.mlp.weight")).parent();
    EXPECT_EQ(LoadMark(layer0.data(LoadMarkRole).toInt()), LoadMark::KeptAtInit);
    EXPECT_EQ(layer0.data(LoadMarkCountRole).toInt(), 1);
    EXPECT_EQ(layer0.siblingAtColumn(LoadColumn).data().toString(),
              QStringLiteral("1 kept at init"));
    EXPECT_FALSE(tree.indexForKey(QStringLiteral("model.layers.0.mlp.weight"))
                     .siblingAtColumn(LoadColumn)
                     .data(Qt::ToolTipRole)
                     .toString()
                     .isEmpty());

    // Problems only: what the reader flagged, and what the load misses or gets wrong.
    proxy.setProblemsOnly(true);
    QStringList kept;
    std::function<void(const QModelIndex &)> walk = [&](const QModelIndex &parent) {
        for (int r = 0; r < proxy.rowCount(parent); ++r) {
            const QModelIndex i = proxy.index(r, 0, parent);
            if (NodeKind(i.data(KindRole).toInt()) == NodeKind::Group)
                walk(i);
            else
                kept.push_back(i.data(KeyRole).toString());
        }
    };
    walk({});
    kept.sort();
    EXPECT_EQ(kept, strings({"model.layers.0.attn.weight", "model.layers.0.mlp.weight",
                             "model.layers.1.attn.weight"}));
    // Cleared marks leave only the reader's problem.
    tree.setLoadMarks(nullptr);
    kept.clear();
    walk({});
    EXPECT_EQ(kept, strings({"model.layers.0.mlp.weight"}));
}

// The runner hands loadMarks() the index the diff read: the tree then marks its leaves by item,
// not by key. Both ways must give every row the same mark, count and tooltip, on the demo with
// every rule on and with the rules whose absence leaves parameters unread or at init.
TEST(LoadMarksTest, ByItemAndByKeyMarkTheSameTree)
{
    const std::string demo = SHARDSCOPE_TEST_DEMO_DIR;
    auto opened = openCheckpoint(demo);
    ASSERT_TRUE(opened.ok()) << opened.error().toString();
    const auto index = std::make_shared<const CheckpointIndex>(std::move(*opened));
    auto layout = layoutFromConfig(demo + "/config.json", {});
    ASSERT_TRUE(layout.ok()) << layout.error().toString();
    CheckpointTreeModel byKey, byItem;
    byKey.setIndex(index);
    byItem.setIndex(index);
    size_t keptAtInit = 0;
    for (const char *rule : {"", "mla_down_proj", "swiglu", "wrapper_prefix"}) {
        SCOPED_TRACE(rule);
        DiffOptions options;
        if (*rule)
            options.disabledRules = {rule};
        // A partial load that ignores everything: what a rule off leaves is kept at init.
        options.strictness = Strictness::IgnoreAll;
        options.strictLoad = false;
        auto diff = diffAgainstLayout(*index, *layout, options);
        ASSERT_TRUE(diff.ok()) << diff.error().toString();
        const auto snapshot = std::make_shared<const DiffResult>(std::move(*diff));
        auto items = loadMarks(snapshot, nullptr, index);
        ASSERT_EQ(items->byEntry.size(), index->tensors.size() + index->objects.size());
        EXPECT_GT(std::count_if(items->byEntry.begin(), items->byEntry.end(),
                                [](uint32_t m) { return m > 0; }),
                  0);
        byItem.setLoadMarks(items);
        byKey.setLoadMarks(loadMarks(snapshot, nullptr));
        keptAtInit += byItem.markedLeaves(LoadMark::KeptAtInit);
        int rows = 0;
        std::function<void(const QModelIndex &, const QModelIndex &)> same =
            [&](const QModelIndex &a, const QModelIndex &b) {
                ASSERT_EQ(byKey.rowCount(a), byItem.rowCount(b));
                for (int r = 0; r < byKey.rowCount(a); ++r) {
                    const QModelIndex x = byKey.index(r, LoadColumn, a);
                    const QModelIndex y = byItem.index(r, LoadColumn, b);
                    ++rows;
                    ASSERT_EQ(x.data(KeyRole), y.data(KeyRole));
                    EXPECT_EQ(x.data(LoadMarkRole), y.data(LoadMarkRole))
                        << x.data(KeyRole).toString().toStdString();
                    EXPECT_EQ(x.data(LoadMarkCountRole), y.data(LoadMarkCountRole));
                    EXPECT_EQ(x.data(), y.data());
                    EXPECT_EQ(x.data(Qt::ToolTipRole), y.data(Qt::ToolTipRole));
                    same(x.siblingAtColumn(0), y.siblingAtColumn(0));
                }
            };
        same({}, {});
        EXPECT_GT(rows, 100);
        // A group shows the worst mark of the leaves below and how many carry it.
        std::function<std::pair<int, int>(const QModelIndex &)> worst =
            [&](const QModelIndex &parent) {
                std::pair<int, int> w{0, 0};
                for (int r = 0; r < byItem.rowCount(parent); ++r) {
                    const QModelIndex i = byItem.index(r, 0, parent);
                    const bool leaf = NodeKind(i.data(KindRole).toInt()) != NodeKind::Group;
                    const std::pair<int, int> below =
                        leaf ? std::pair<int, int>{i.data(LoadMarkRole).toInt(), 1} : worst(i);
                    if (!leaf) {
                        EXPECT_EQ(i.data(LoadMarkRole).toInt(), below.first);
                        if (below.first) {
                            EXPECT_EQ(i.data(LoadMarkCountRole).toInt(), below.second);
                        }
                    }
                    if (below.first > w.first)
                        w = below;
                    else if (below.first == w.first)
                        w.second += below.second;
                }
                return w;
            };
        worst({});
    }
    EXPECT_GT(keptAtInit, 0u); // the MLA rule off leaves the fused parameters at init
}

TEST(VerifyTableModelTest, WorstFirstWithTheirStoredKeys)
{
    auto report = std::make_shared<VerifyReport>();
    for (auto [name, outcome] : {std::pair{"embed.weight", ParamCheck::Outcome::Identical},
                                 std::pair{"attn.a", ParamCheck::Outcome::Mismatch},
                                 std::pair{"mlp.fused", ParamCheck::Outcome::KeptInitial}}) {
        ParamCheck p;
        p.name = name;
        p.outcome = outcome;
        p.mismatches = outcome == ParamCheck::Outcome::Mismatch ? 3 : 0;
        p.firstMismatch = outcome == ParamCheck::Outcome::Mismatch ? 5 : -1;
        report->result.params.push_back(p);
    }
    VerifyTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setReport(report, makeDiff());
    ASSERT_EQ(model.rowCount(), 3);
    auto name = [&](int r) { return model.index(r, 0).data().toString(); };
    EXPECT_EQ(name(0), QStringLiteral("mlp.fused"));
    EXPECT_EQ(name(1), QStringLiteral("attn.a"));
    EXPECT_EQ(name(2), QStringLiteral("embed.weight"));
    EXPECT_EQ(model.index(1, VerifyTableModel::MismatchColumn).data().toString(),
              QStringLiteral("3 (first at 5)"));
    EXPECT_EQ(model.index(2, 0).data(VerifyTableModel::SourceKeyRole).toString(),
              QStringLiteral("model.embed.weight"));
    EXPECT_EQ(model.rowOf(QStringLiteral("attn.a")), 1);
    model.setReport(nullptr);
    EXPECT_EQ(model.rowCount(), 0);
}

// Tensors not compared come first (a comparison that skipped some is no all-clear), then the
// worst: beyond the tolerance, within it, identical; larger relative L2 first.
TEST(ValueDiffModelTest, NotComparedFirstThenWorstFirst)
{
    using V = TensorValueDiff::Verdict;
    auto values = std::make_shared<ValueDiffResult>();
    for (auto [name, verdict, relL2] :
         {std::tuple{"same", V::Identical, 0.0}, std::tuple{"close", V::Within, 1e-6},
          std::tuple{"far", V::Different, 0.5}, std::tuple{"lost", V::NotCompared, 0.0},
          std::tuple{"farther", V::Different, 2.0}}) {
        TensorValueDiff t;
        t.name = name;
        t.verdict = verdict;
        t.relL2 = relL2;
        t.why = verdict == V::NotCompared ? "second checkpoint: not found" : "";
        values->tensors.push_back(t);
    }
    ValueDiffModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setValues(values);
    ASSERT_EQ(model.rowCount(), 5);
    QStringList order;
    for (int r = 0; r < model.rowCount(); ++r)
        order.push_back(model.index(r, 0).data().toString());
    EXPECT_EQ(order,
              (QStringList{QStringLiteral("lost"), QStringLiteral("farther"), QStringLiteral("far"),
                           QStringLiteral("close"), QStringLiteral("same")}));
    EXPECT_EQ(model.index(0, ValueDiffModel::VerdictColumn).data().toString(),
              QStringLiteral("not_compared: second checkpoint: not found"));
    EXPECT_LT(model.index(0, ValueDiffModel::VerdictColumn).data(ValueDiffModel::SortRole).toInt(),
              model.index(1, ValueDiffModel::VerdictColumn).data(ValueDiffModel::SortRole).toInt());
    EXPECT_EQ(model.rowOfTensor(3), 0);
    model.setValues(nullptr);
    EXPECT_EQ(model.rowCount(), 0);
}

TEST(ChangeListModelTest, NamesBothSides)
{
    auto diff = std::make_shared<CheckpointDiff>();
    diff->changes.push_back({KeyChange::Kind::Added, "b.only", "", "", ""});
    diff->changes.push_back({KeyChange::Kind::Renamed, "a.name", "b.name", "mtp", ""});
    ChangeListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setComparison(diff);
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_TRUE(model.index(0, ChangeListModel::FirstColumn).data().toString().isEmpty());
    EXPECT_EQ(model.index(0, ChangeListModel::SecondColumn).data().toString(),
              QStringLiteral("b.only"));
    EXPECT_EQ(model.index(1, ChangeListModel::SecondColumn).data().toString(),
              QStringLiteral("b.name"));
    EXPECT_FALSE(model.index(1, 0).data(ChangeListModel::ChangedRole).toBool());
}

TEST(ShardMapTest, ChunksGapsOverlapsSectionsAndReads)
{
    auto index = std::make_shared<CheckpointIndex>();
    index->files = {"a.distcp", "b.distcp"};
    // [10, 4] stored as rows 0–4 (file a), rows 3–6 (file b, overlapping row 3), rows 8–10 (a):
    // rows 6–8 are held by no chunk.
    TensorEntry t = makeTensor("w", DType::Float32, {10, 4});
    t.chunks.clear();
    t.chunkDims.clear();
    for (auto [row, rows, file] :
         {std::tuple{0, 4, 0u}, std::tuple{3, 3, 1u}, std::tuple{8, 2, 0u}}) {
        Location l;
        l.file = file;
        t.chunks.push_back(l);
        t.chunkDims.append(std::vector<int64_t>{row, 0, rows, 4});
    }
    index->tensors.push_back(t);
    DiffResult diff;
    DiffEntry a = entry("q", LoadStatus::Merge, {"w"});
    a.sources[0].begin = 0;
    a.sources[0].end = 6;
    DiffEntry b = entry("kv", LoadStatus::Merge, {"w"});
    b.sources[0].begin = 0;
    b.sources[0].end = 4;
    b.sources[0].storedRow = 6;
    diff.entries = {a, b};
    VerifyReport report;
    auto plan = std::make_shared<LoadPlan>();
    RankPlan rank;
    rank.rank = 1;
    ShardRead read;
    read.key = "w";
    read.offsets = {5, 0};
    read.sizes = {5, 4};
    rank.reads.push_back(read);
    plan->ranks.push_back(rank);
    report.plan = plan;

    const ShardMap map = shardMap(*index, QStringLiteral("w"), &diff, &report);
    ASSERT_TRUE(map.valid());
    EXPECT_EQ(map.rows, 10);
    EXPECT_EQ(map.cols, 4);
    ASSERT_EQ(map.chunks.size(), 3u);
    EXPECT_EQ(map.files, strings({"a.distcp", "b.distcp"}));
    EXPECT_TRUE(map.chunks[0].overlaps && map.chunks[1].overlaps);
    EXPECT_FALSE(map.chunks[2].overlaps);
    EXPECT_EQ(map.uncovered, 2 * 4);
    ASSERT_EQ(map.sections.size(), 2u);
    EXPECT_EQ(map.sections[1].row, 6);
    EXPECT_EQ(map.sections[1].name, QStringLiteral("kv"));
    ASSERT_EQ(map.reads.size(), 1u);
    EXPECT_EQ(map.reads[0].rank, 1);
    EXPECT_FALSE(shardMap(*index, QStringLiteral("nope"), nullptr, nullptr).valid());
}

TEST(LayerFamilyTest, TakesOutTheFirstLayerNumber)
{
    const LayerKey k = layerKey(QStringLiteral("decoder.layers.12.mlp.experts.local_experts.3.w"));
    EXPECT_EQ(k.layer, 12);
    EXPECT_EQ(k.family, QStringLiteral("decoder.layers.{i}.mlp.experts.local_experts.3.w"));
    EXPECT_EQ(keyOfLayer(k.family, 2),
              QStringLiteral("decoder.layers.2.mlp.experts.local_experts.3.w"));
    EXPECT_EQ(familyGlob(k.family),
              QStringLiteral("decoder.layers.*.mlp.experts.local_experts.3.w"));
    EXPECT_EQ(layerKey(QStringLiteral("model.h.0.attn")).family,
              QStringLiteral("model.h.{i}.attn"));
    EXPECT_TRUE(layerKey(QStringLiteral("embedding.word_embeddings.weight")).family.isEmpty());
    EXPECT_TRUE(layerKey(QStringLiteral("player.3.x")).family.isEmpty());
}

TEST(ReproCommandTest, WhatTheCliIsGiven)
{
    DiffOptions o;
    o.disabledRules = {"mla_down_proj"};
    o.strictness = Strictness::IgnoreAll;
    o.strictLoad = false;
    EXPECT_EQ(
        repro::commandLine(repro::diff(QStringLiteral("report"), QStringLiteral("/ck pt"),
                                       QStringLiteral("it's.json"), o, QStringLiteral("r.md"))),
        QStringLiteral("shardscope-cli report '/ck pt' --layout 'it'\\''s.json' "
                       "--strictness ignore_all --no-strict --disable-rule mla_down_proj "
                       "-o r.md"));
    EXPECT_EQ(repro::diffOptions({}), QStringList());
    VerifyRequest v;
    v.tp = 2;
    v.lastStageLayers = 3;
    EXPECT_EQ(repro::verify(QStringLiteral("c"), QStringLiteral("l"), v),
              strings({"shardscope-cli", "verify", "c", "--layout", "l", "--tp", "2",
                       "--pp-last-layers", "3"}));
    ValueDiffRequest values;
    values.atol = 0.5;
    EXPECT_EQ(repro::compare(QStringLiteral("diff"), QStringLiteral("a"), QStringLiteral("b"), {},
                             &values, QStringLiteral("l"), {}),
              strings({"shardscope-cli", "diff", "a", "--against", "b", "--values", "--layout", "l",
                       "--atol", "0.5"}));
    LayoutOptions lo;
    EXPECT_EQ(
        repro::layout(QStringLiteral("config.json"), lo, QStringLiteral("layout.json")),
        strings({"shardscope-cli", "layout", "--from-config", "config.json", "-o", "layout.json"}));
}
