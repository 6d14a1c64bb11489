// SPDX-License-Identifier: MIT
#include "testutil.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointtreemodel.h"

#include <QAbstractItemModelTester>
#include <QElapsedTimer>
#include <QSignalSpy>

#include <gtest/gtest.h>

using namespace shardscope;
using namespace shardscope::model;
using namespace shardscope::model::test;

namespace {

class TreeModelTest : public ::testing::Test
{
protected:
    CheckpointTreeModel model;
    QAbstractItemModelTester tester{&model, QAbstractItemModelTester::FailureReportingMode::Fatal};
};

} // namespace

TEST_F(TreeModelTest, EmptyModelHasNoRows)
{
    EXPECT_EQ(model.rowCount(), 0);
    EXPECT_EQ(model.columnCount(), int(ColumnCount));
    EXPECT_FALSE(model.hasChildren());
    model.clear();
    EXPECT_EQ(model.rowCount(), 0);
}

TEST_F(TreeModelTest, GroupsKeysByDottedPrefix)
{
    QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
    model.setIndex(makeSmallIndex());
    EXPECT_EQ(resets.count(), 1);

    EXPECT_EQ(childNames(model), strings({"model", "scale", "iteration"}));
    const QModelIndex m = path(model, strings({"model"}));
    EXPECT_EQ(childNames(model, m), strings({"embed", "layers", "norm"}));
    const QModelIndex layers = path(model, strings({"model", "layers"}));
    // Layer 10 holds only attn: the single-child chain is one row.
    EXPECT_EQ(childNames(model, layers), strings({"0", "1", "10.attn"}));
    const QModelIndex layer0 = path(model, strings({"model", "layers", "0"}));
    EXPECT_EQ(childNames(model, layer0), strings({"attn", "mlp"}));
    EXPECT_EQ(layer0.parent(), layers);
    EXPECT_EQ(layers.parent(), m);
    EXPECT_FALSE(m.parent().isValid());
    // root; groups model, embed, layers, 0, attn, mlp, 1, attn, mlp, 10, attn; leaves: five
    // weights, embed.weight, norm, scale, iteration
    EXPECT_EQ(model.nodeCount(), 21u);
}

TEST_F(TreeModelTest, LeavesNeverHaveChildren)
{
    model.setIndex(makeSmallIndex());
    const QModelIndex leaf = path(model, strings({"model", "layers", "0", "mlp", "weight"}));
    ASSERT_TRUE(leaf.isValid());
    EXPECT_TRUE(model.flags(leaf).testFlag(Qt::ItemNeverHasChildren));
    EXPECT_EQ(model.rowCount(leaf), 0);
    const QModelIndex object = path(model, strings({"iteration"}));
    EXPECT_TRUE(model.flags(object).testFlag(Qt::ItemNeverHasChildren));
    const QModelIndex group = path(model, strings({"model", "layers"}));
    EXPECT_FALSE(model.flags(group).testFlag(Qt::ItemNeverHasChildren));
    EXPECT_TRUE(model.hasChildren(group));
}

TEST_F(TreeModelTest, ColumnsAndRoles)
{
    model.setIndex(makeSmallIndex());
    const QModelIndex leaf = path(model, strings({"model", "layers", "0", "mlp", "weight"}));
    ASSERT_TRUE(leaf.isValid());
    auto col = [&](int c) { return leaf.siblingAtColumn(c); };
    EXPECT_EQ(col(DTypeColumn).data().toString(), QStringLiteral("float32"));
    EXPECT_EQ(col(ShapeColumn).data().toString(), QStringLiteral("[32, 8]"));
    EXPECT_EQ(col(ChunksColumn).data().toString(), QStringLiteral("4"));
    EXPECT_EQ(col(SizeColumn).data().toString(), QStringLiteral("1.00 KiB"));
    EXPECT_TRUE(col(StatusColumn).data().toString().contains(QStringLiteral("past end")));

    EXPECT_EQ(leaf.data(KeyRole).toString(), QStringLiteral("model.layers.0.mlp.weight"));
    EXPECT_EQ(NodeKind(leaf.data(KindRole).toInt()), NodeKind::Tensor);
    EXPECT_EQ(leaf.data(NumelRole).toLongLong(), 256);
    EXPECT_EQ(leaf.data(BytesRole).toULongLong(), 1024u);
    EXPECT_EQ(leaf.data(ChunkCountRole).toULongLong(), 4u);
    EXPECT_TRUE(leaf.data(HasProblemRole).toBool());
    EXPECT_EQ(leaf.data(DTypeRole).toString(), QStringLiteral("float32"));
    EXPECT_EQ(leaf.data(EntryIndexRole).toInt(), 2);
    ASSERT_NE(model.tensorAt(leaf), nullptr);
    EXPECT_EQ(model.tensorAt(leaf)->key, "model.layers.0.mlp.weight");
    ASSERT_EQ(model.problemsAt(leaf).size(), 1u);

    // Groups: dotted prefix as key, sums over their subtree.
    const QModelIndex layers = path(model, strings({"model", "layers"}));
    EXPECT_EQ(layers.data(KeyRole).toString(), QStringLiteral("model.layers"));
    EXPECT_EQ(NodeKind(layers.data(KindRole).toInt()), NodeKind::Group);
    EXPECT_EQ(layers.data(NumelRole).toLongLong(), 64 + 256 + 64 + 256 + 64);
    EXPECT_EQ(layers.data(ChunkCountRole).toULongLong(), 1u + 4 + 1 + 1 + 1);
    EXPECT_TRUE(layers.data(HasProblemRole).toBool());
    EXPECT_EQ(layers.data(ProblemCountRole).toInt(), 1);
    EXPECT_EQ(model.tensorAt(layers), nullptr);
    const QModelIndex layer1 = path(model, strings({"model", "layers", "1"}));
    EXPECT_FALSE(layer1.data(HasProblemRole).toBool());

    // Sort role: numbers for numeric columns, the name for the name column.
    EXPECT_EQ(col(SizeColumn).data(SortRole).toULongLong(), 1024u);
    EXPECT_EQ(col(ShapeColumn).data(SortRole).toULongLong(), 256u);
    EXPECT_EQ(leaf.data(SortRole).toString(), QStringLiteral("weight"));

    const QModelIndex object = path(model, strings({"iteration"}));
    EXPECT_EQ(NodeKind(object.data(KindRole).toInt()), NodeKind::Object);
    EXPECT_EQ(object.siblingAtColumn(ShapeColumn).data().toString(), QStringLiteral("42"));
    ASSERT_NE(model.objectAt(object), nullptr);
    EXPECT_EQ(model.dtypeNames(), strings({"bfloat16", "float32", "float64"}));
}

TEST_F(TreeModelTest, IndexForKeyFindsLeaves)
{
    model.setIndex(makeSmallIndex());
    const QModelIndex i = model.indexForKey(QStringLiteral("model.layers.10.attn.weight"));
    ASSERT_TRUE(i.isValid());
    EXPECT_EQ(i.data(KeyRole).toString(), QStringLiteral("model.layers.10.attn.weight"));
    EXPECT_FALSE(model.indexForKey(QStringLiteral("model.layers")).isValid());
    EXPECT_FALSE(model.indexForKey(QStringLiteral("nope")).isValid());
}

TEST_F(TreeModelTest, SplitsRecordedNestingAtDotsToo)
{
    auto index = std::make_shared<CheckpointIndex>();
    // Megatron-style planner data: a state-dict level whose keys are module FQNs.
    TensorEntry t = makeTensor("model.module.decoder.layers.0.weight", DType::Float32, {3});
    t.path = KeyPath::fromParts(t.key, {"model", "module.decoder.layers.0.weight"});
    index->tensors.push_back(t);
    // A recorded path without dots is used as is.
    TensorEntry u = makeTensor("x.y", DType::Float32, {1});
    u.path = KeyPath::fromParts(u.key, {"x", "y"});
    index->tensors.push_back(u);
    // A key that is both a leaf and a prefix of other keys keeps both rows.
    index->tensors.push_back(makeTensor("a", DType::Float32, {1}));
    index->tensors.push_back(makeTensor("a.b", DType::Float32, {1}));
    model.setIndex(index);
    // model › module › decoder › layers › 0 holds one leaf: one row, the leaf below it.
    const QModelIndex chain = path(model, strings({"model.module.decoder.layers.0"}));
    EXPECT_EQ(chain.data(KeyRole).toString(), QStringLiteral("model.module.decoder.layers.0"));
    EXPECT_EQ(childNames(model, chain), strings({"weight"}));
    EXPECT_EQ(
        path(model, strings({"model.module.decoder.layers.0", "weight"})).data(KeyRole).toString(),
        QStringLiteral("model.module.decoder.layers.0.weight"));
    EXPECT_EQ(childNames(model), strings({"model.module.decoder.layers.0", "x", "a", "a"}));
}

// Megatron's wrapper chains (optimizer.state.module.module.module.decoder…) cost one row, not
// a level each, and the chain's sums and key are the whole subtree's.
TEST_F(TreeModelTest, CompactsSingleChildChains)
{
    auto index = std::make_shared<CheckpointIndex>();
    for (const char *k : {"optimizer.state.module.module.module.decoder.layers.0.w.exp_avg",
                          "optimizer.state.module.module.module.decoder.layers.1.w.exp_avg",
                          "optimizer.param_to_group_meta.lr"})
        index->tensors.push_back(makeTensor(k, DType::Float32, {4}));
    model.setIndex(index);
    EXPECT_EQ(childNames(model), strings({"optimizer"}));
    const QModelIndex chain =
        path(model, strings({"optimizer", "state.module.module.module.decoder.layers"}));
    ASSERT_TRUE(chain.isValid());
    EXPECT_EQ(chain.data(KeyRole).toString(),
              QStringLiteral("optimizer.state.module.module.module.decoder.layers"));
    EXPECT_EQ(childNames(model, chain), strings({"0.w", "1.w"}));
    const QModelIndex leaf =
        path(model,
             strings({"optimizer", "state.module.module.module.decoder.layers", "0.w", "exp_avg"}));
    EXPECT_EQ(leaf.data(KeyRole).toString(),
              QStringLiteral("optimizer.state.module.module.module.decoder.layers.0.w.exp_avg"));
    EXPECT_EQ(model.indexForKey(leaf.data(KeyRole).toString()), leaf);
    EXPECT_EQ(chain.siblingAtColumn(SizeColumn).data().toString(), QStringLiteral("32 B"));
    // param_to_group_meta holds one leaf: it stays a group of its own.
    EXPECT_EQ(childNames(model, path(model, strings({"optimizer", "param_to_group_meta"}))),
              strings({"lr"}));
}

// One toggle away: every entry a top-level row named by its full key, whatever its depth.
TEST_F(TreeModelTest, FlatListNamesEveryEntryByItsKey)
{
    QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
    auto index = makeSmallIndex();
    model.setIndex(index);
    model.setFlat(true);
    EXPECT_EQ(resets.count(), 2);
    ASSERT_EQ(model.rowCount(), int(index->tensors.size() + index->objects.size()));
    for (int r = 0; r < model.rowCount(); ++r) {
        const QModelIndex i = model.index(r, 0);
        EXPECT_EQ(i.data().toString(), i.data(KeyRole).toString());
        EXPECT_FALSE(model.hasChildren(i));
        EXPECT_FALSE(i.parent().isValid());
        EXPECT_EQ(model.indexForKey(i.data(KeyRole).toString()), i);
    }
    EXPECT_EQ(model.index(0, 0).data().toString(), QStringLiteral("model.embed.weight"));
    model.setFlat(false);
    EXPECT_EQ(childNames(model), strings({"model", "scale", "iteration"}));
    // A group says how many entries it holds.
    EXPECT_EQ(path(model, strings({"model", "layers"})).siblingAtColumn(ShapeColumn).data(),
              QStringLiteral("5 entries"));
}

TEST_F(TreeModelTest, ResetReplacesContents)
{
    model.setIndex(makeSmallIndex());
    auto other = std::make_shared<CheckpointIndex>();
    other->tensors.push_back(makeTensor("x", DType::Int64, {2}));
    model.setIndex(other);
    EXPECT_EQ(childNames(model), strings({"x"}));
    model.clear();
    EXPECT_EQ(model.rowCount(), 0);
}

// DeepSeek-V3 scale: ~10^5 keys with 1.5 M chunks must build in well under a second.
TEST(TreeModelScale, DeepSeekSizedIndexBuildsFast)
{
    auto index = std::make_shared<CheckpointIndex>();
    const int layers = 61, experts = 256;
    index->tensors.reserve(size_t(layers) * (experts * 3 + 20));
    uint64_t chunks = 0;
    for (int l = 0; l < layers; ++l) {
        const std::string layer = "model.layers." + std::to_string(l) + ".";
        for (int e = 0; e < experts; ++e) {
            for (const char *w : {"gate_proj", "up_proj", "down_proj"}) {
                TensorEntry t =
                    makeTensor(layer + "mlp.experts." + std::to_string(e) + "." + w + ".weight",
                               DType::Float8E4M3FN, {2048, 7168}, 32);
                chunks += t.chunks.size();
                index->tensors.push_back(std::move(t));
            }
        }
        for (int k = 0; k < 20; ++k) {
            TensorEntry t = makeTensor(layer + "self_attn.w" + std::to_string(k), DType::BFloat16,
                                       {7168, 512}, 16);
            chunks += t.chunks.size();
            index->tensors.push_back(std::move(t));
        }
    }
    ASSERT_GT(index->tensors.size(), 45'000u);
    ASSERT_GT(chunks, 1'500'000u);

    CheckpointTreeModel model;
    QElapsedTimer timer;
    timer.start();
    model.setIndex(index);
    const qint64 ms = timer.elapsed();
    std::printf("  built %zu nodes from %zu keys (%llu chunks) in %lld ms\n", model.nodeCount(),
                index->tensors.size(), static_cast<unsigned long long>(chunks),
                static_cast<long long>(ms));
    EXPECT_LT(ms, 1000);
    EXPECT_EQ(model.rowCount(), 1);
    const QModelIndex experts0 = path(model, strings({"model.layers", "0", "mlp.experts"}));
    EXPECT_EQ(model.rowCount(experts0), experts);
    EXPECT_EQ(model.index(0, 0).data(ChunkCountRole).toULongLong(), chunks);

    // A recursive filter over every leaf stays interactive.
    CheckpointFilterProxy proxy;
    proxy.setSourceModel(&model);
    proxy.sort(NameColumn, Qt::AscendingOrder);
    timer.restart();
    proxy.setFilterText(QStringLiteral("layers.6*.experts.25?.down"));
    const QModelIndex layerGroup = path(proxy, strings({"model.layers"}));
    const qint64 filterMs = timer.elapsed();
    std::printf("  filtered %zu keys in %lld ms\n", index->tensors.size(),
                static_cast<long long>(filterMs));
    EXPECT_EQ(childNames(proxy, layerGroup), strings({"6", "60"}));
    EXPECT_LT(filterMs, 2000);
}

// Past 100,000 entries the tree is built on two threads (the second half merged into the first):
// every row, its name, key, kind, entry, sums and problems, and the flat list, as one thread
// builds them. The halves share groups at every depth, a chain is compacted only once both halves
// are in, and some keys carry a nesting of their own.
namespace {

// 120,000 entries whose groups are shared across the two halves of the entries at every depth,
// with a chain compacted only once both halves are in, and some keys with a nesting of their own.
std::shared_ptr<CheckpointIndex> mixedScaleIndex()
{
    auto index = std::make_shared<CheckpointIndex>();
    for (int l = 0; l < 40; ++l)
        for (int e = 0; e < 1500; ++e) {
            const std::string key = "model.module.layers." + std::to_string(l) + ".experts." +
                                    std::to_string(e % 300) + (e < 300 ? ".w" : ".v") +
                                    std::to_string(e / 300);
            TensorEntry t = makeTensor(key, DType::BFloat16, {4, int64_t(e % 7 + 1)}, 1 + e % 3);
            if (e % 97 == 0)
                t.path =
                    KeyPath::fromParts(t.key, std::vector<std::string>{"model", key.substr(6)});
            index->tensors.push_back(std::move(t));
        }
    index->tensors.push_back(makeTensor("chain.a.b.first", DType::Float32, {1}));
    for (int i = 0; i < 60'000; ++i) {
        ObjectEntry o;
        o.key = "optimizer.param_to_group_meta.model.module.layers." + std::to_string(i % 40) +
                ".lr" + std::to_string(i);
        if (i % 2)
            o.location = Location{0, 0, Encoding::TorchSaveArchive, uint64_t(i), uint64_t(i % 9)};
        index->objects.push_back(std::move(o));
    }
    ObjectEntry tail;
    tail.key = "chain.a.b.second";
    index->objects.push_back(std::move(tail));
    index->problems.push_back(
        {"model.module.layers.3.experts.7.w0", "f", {}, "cut", Problem::Effect::Unreadable});
    index->problems.push_back({"chain.a.b.second", "f", {}, "gone", Problem::Effect::Unreadable});
    return index;
}

} // namespace

TEST(TreeModelScale, SameTreeOnOneAndTwoThreads)
{
    auto index = mixedScaleIndex();
    ASSERT_GE(index->tensors.size() + index->objects.size(), 100'000u);

    auto dump = [&](int threads) {
        CheckpointTreeModel::setBuildThreads(threads);
        CheckpointTreeModel model;
        model.setIndex(index);
        std::vector<std::string> rows;
        std::function<void(const QModelIndex &, const std::string &)> walk =
            [&](const QModelIndex &parent, const std::string &at) {
                for (int r = 0; r < model.rowCount(parent); ++r) {
                    const QModelIndex i = model.index(r, 0, parent);
                    const std::string here = at + "/" + i.data().toString().toStdString();
                    rows.push_back(
                        here + " key=" + i.data(KeyRole).toString().toStdString() +
                        " kind=" + std::to_string(i.data(KindRole).toInt()) +
                        " entry=" + std::to_string(i.data(EntryIndexRole).toInt()) +
                        " numel=" + std::to_string(i.data(NumelRole).toLongLong()) +
                        " bytes=" + std::to_string(i.data(BytesRole).toULongLong()) +
                        " chunks=" + std::to_string(i.data(ChunkCountRole).toULongLong()) +
                        " leaves=" + std::to_string(i.data(LeafCountRole).toULongLong()) +
                        " problems=" + std::to_string(i.data(ProblemCountRole).toInt()));
                    walk(i, here);
                }
            };
        walk({}, "");
        model.setFlat(true); // the leaves in entry order
        rows.push_back("flat rows " + std::to_string(model.rowCount()));
        for (int k : {0, 1, 29'999, 60'000, 60'001, 120'000})
            rows.push_back("flat " + std::to_string(k) + " " +
                           model.index(k, 0).data(KeyRole).toString().toStdString());
        CheckpointTreeModel::setBuildThreads(0);
        return rows;
    };
    const std::vector<std::string> one = dump(1), two = dump(2);
    ASSERT_EQ(one.size(), two.size());
    for (size_t i = 0; i < one.size(); ++i)
        ASSERT_EQ(one[i], two[i]) << "row " << i;
    EXPECT_GT(one.size(), 120'000u);
}

// A key from a hostile file shows as one line with its controls, bidirectional overrides and
// invalid bytes made visible; the data roles keep the key as stored, so selection and copy work.
TEST_F(TreeModelTest, HostileNamesShowEscapedButKeepTheirKey)
{
    auto index = std::make_shared<CheckpointIndex>();
    index->format = Format::Dcp;
    index->files = {"__0_0.distcp"};
    index->fileSizes = {1 << 20};
    const std::string hostile = "\x1b]0;title\x07\nproblem: fake\xe2\x80\xae\xff";
    index->tensors.push_back(makeTensor("model." + hostile, DType::Float32, {8}));
    model.setIndex(index);
    const QModelIndex leaf = model.index(0, 0, model.index(0, 0));
    ASSERT_TRUE(leaf.isValid());
    const QString shown = leaf.data().toString();
    EXPECT_FALSE(shown.contains(QLatin1Char('\n')));
    for (QChar c : shown)
        EXPECT_TRUE(c.isPrint()) << shown.toStdString();
    EXPECT_TRUE(shown.contains(QStringLiteral("\\x1b]0;title\\x07\\nproblem: fake\\u202e\\xff")))
        << shown.toStdString();
    EXPECT_EQ(leaf.data(KeyRole).toString().toStdString(),
              QString::fromUtf8("model." + hostile).toStdString());
}

// The top-level rows a big open paints first (prepareTop(), one pass over the keys) are the whole
// tree's: names with chains folded alike, kinds, entries, keys and sums, in the same order; the
// whole tree then replaces them with a reset, and completeIndex() refuses them.
TEST(TreeModelScale, TopRowsAreTheWholeTreesTopRows)
{
    auto small = makeSmallIndex();
    auto chains = std::make_shared<CheckpointIndex>();
    // "x.y" folds up to where a leaf sits beside the next group; "solo" holds one leaf only; a
    // top-level leaf and a group of the same name are two rows; "deep" folds four levels.
    for (const char *key : {"x.y.leaf", "x.y.z.w", "solo.only", "same", "same.inside",
                            "deep.a.b.c.d", "deep.a.b.c.e", "x.y.z.v", ""})
        chains->tensors.push_back(makeTensor(key, DType::Float32, {3, 2}, 2));
    ObjectEntry stored;
    stored.key = "deep.a.b.c.object";
    stored.location = Location{0, 0, Encoding::TorchSaveArchive, 7, 1234};
    chains->objects.push_back(std::move(stored));
    std::vector<std::shared_ptr<const CheckpointIndex>> indexes{small, chains, mixedScaleIndex()};
    auto demo = openCheckpoint(std::string(SHARDSCOPE_TEST_DEMO_DIR), OpenOptions{});
    ASSERT_TRUE(demo) << demo.error().toString();
    indexes.push_back(std::make_shared<const CheckpointIndex>(std::move(*demo)));

    for (const auto &index : indexes) {
        CheckpointTreeModel whole, top;
        QAbstractItemModelTester tester{&top,
                                        QAbstractItemModelTester::FailureReportingMode::Fatal};
        whole.setIndex(index);
        top.adopt(CheckpointTreeModel::prepareTop(index));
        EXPECT_TRUE(top.isTopOnly());
        EXPECT_TRUE(top.isProvisional());
        EXPECT_EQ(top.dtypeNames(), whole.dtypeNames());
        ASSERT_EQ(top.rowCount(), whole.rowCount());
        ASSERT_GT(top.rowCount(), 0);
        for (int r = 0; r < whole.rowCount(); ++r) {
            const QModelIndex a = whole.index(r, 0), b = top.index(r, 0);
            SCOPED_TRACE(a.data(KeyRole).toString().toStdString());
            for (int c = 0; c < ColumnCount; ++c) {
                if (c == StatusColumn) // problems come with the whole tree
                    continue;
                EXPECT_EQ(top.index(r, c).data().toString().toStdString(),
                          whole.index(r, c).data().toString().toStdString())
                    << "column " << c;
            }
            for (int role : {int(KeyRole), int(KindRole), int(EntryIndexRole), int(NumelRole),
                             int(BytesRole), int(ChunkCountRole), int(LeafCountRole)})
                EXPECT_EQ(b.data(role).toString().toStdString(),
                          a.data(role).toString().toStdString())
                    << "role " << role;
            EXPECT_EQ(top.hasChildren(b), whole.hasChildren(a));
            if (NodeKind(a.data(KindRole).toInt()) != NodeKind::Group) {
                EXPECT_EQ(top.indexForKey(a.data(KeyRole).toString()), b);
            }
        }
        EXPECT_FALSE(top.completeIndex(index)) << "a top-only tree completed in place";
        QSignalSpy resets(&top, &QAbstractItemModel::modelReset);
        top.adopt(CheckpointTreeModel::prepare(index));
        EXPECT_EQ(resets.count(), 1);
        EXPECT_FALSE(top.isTopOnly());
        EXPECT_EQ(top.nodeCount(), whole.nodeCount());
    }
}
