// SPDX-License-Identifier: MIT
#include "testutil.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointtreemodel.h"

#include <QAbstractItemModelTester>

#include <gtest/gtest.h>

#include <functional>

using namespace shardscope;
using namespace shardscope::model;
using namespace shardscope::model::test;

namespace {

// Full keys of every visible leaf, depth first.
QStringList visibleLeaves(const QAbstractItemModel &m, const QModelIndex &parent = {})
{
    QStringList out;
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const QModelIndex i = m.index(r, 0, parent);
        if (NodeKind(i.data(KindRole).toInt()) == NodeKind::Group)
            out += visibleLeaves(m, i);
        else
            out.push_back(i.data(KeyRole).toString());
    }
    return out;
}

class FilterProxyTest : public ::testing::Test
{
protected:
    void SetUp() override
    {
        proxy.setSourceModel(&source);
        source.setIndex(makeSmallIndex());
    }

    CheckpointTreeModel source;
    QAbstractItemModelTester sourceTester{&source,
                                          QAbstractItemModelTester::FailureReportingMode::Fatal};
    CheckpointFilterProxy proxy;
    QAbstractItemModelTester proxyTester{&proxy,
                                         QAbstractItemModelTester::FailureReportingMode::Fatal};
};

} // namespace

TEST_F(FilterProxyTest, NoFilterShowsEverything)
{
    EXPECT_FALSE(proxy.isFiltering());
    EXPECT_EQ(visibleLeaves(proxy).size(), 9);
}

TEST_F(FilterProxyTest, SubstringIsCaseInsensitiveAndKeepsAncestors)
{
    proxy.setFilterText(QStringLiteral("ATTN"));
    EXPECT_EQ(visibleLeaves(proxy),
              strings({"model.layers.0.attn.weight", "model.layers.1.attn.weight",
                       "model.layers.10.attn.weight"}));
    EXPECT_EQ(childNames(proxy), strings({"model"}));
    EXPECT_EQ(childNames(proxy, proxy.index(0, 0)), strings({"layers"}));
}

TEST_F(FilterProxyTest, GlobMatchesAnywhere)
{
    proxy.setFilterText(QStringLiteral("layers.1*.weight"));
    EXPECT_EQ(visibleLeaves(proxy),
              strings({"model.layers.1.attn.weight", "model.layers.1.mlp.weight",
                       "model.layers.10.attn.weight"}));
    proxy.setFilterText(QStringLiteral("*.mlp.?eight"));
    EXPECT_EQ(visibleLeaves(proxy),
              strings({"model.layers.0.mlp.weight", "model.layers.1.mlp.weight"}));
    proxy.setFilterText(QString());
    EXPECT_EQ(visibleLeaves(proxy).size(), 9);
}

TEST_F(FilterProxyTest, ProblemsOnly)
{
    proxy.setProblemsOnly(true);
    EXPECT_EQ(visibleLeaves(proxy), strings({"model.layers.0.mlp.weight"}));
    proxy.setFilterText(QStringLiteral("attn"));
    EXPECT_TRUE(visibleLeaves(proxy).isEmpty());
    EXPECT_EQ(proxy.rowCount(), 0);
    proxy.setProblemsOnly(false);
    EXPECT_EQ(visibleLeaves(proxy).size(), 3);
}

TEST_F(FilterProxyTest, DTypeFilterHidesOtherDTypesAndObjects)
{
    proxy.setDTypeFilter(QStringLiteral("bfloat16"));
    EXPECT_EQ(visibleLeaves(proxy), strings({"model.embed.weight"}));
    proxy.setDTypeFilter(QStringLiteral("float64"));
    EXPECT_EQ(visibleLeaves(proxy), strings({"scale"}));
    proxy.setDTypeFilter(QString());
    EXPECT_EQ(visibleLeaves(proxy).size(), 9);
}

// A filter's counts are the matches': a group shows how many of its entries matched, and the
// chunks and bytes of those (ancestors do not keep their unfiltered counts).
TEST_F(FilterProxyTest, GroupCountsAreTheMatches)
{
    proxy.setFilterText(QStringLiteral("mlp"));
    const QModelIndex layers = path(proxy, strings({"model", "layers"}));
    ASSERT_TRUE(layers.isValid());
    EXPECT_EQ(layers.siblingAtColumn(ShapeColumn).data().toString(),
              QStringLiteral("2 of 5 entries"));
    // The two mlp weights: 4 + 1 chunks, 32×8 float32 each.
    EXPECT_EQ(layers.data(ChunkCountRole).toULongLong(), 5u);
    EXPECT_EQ(layers.siblingAtColumn(ChunksColumn).data().toString(), QStringLiteral("5"));
    EXPECT_EQ(layers.data(BytesRole).toULongLong(), 2u * 32 * 8 * 4);
    EXPECT_EQ(layers.data(LeafCountRole).toULongLong(), 2u);
    // A narrower filter recomputes them; none gives the source's own again.
    proxy.setFilterText(QStringLiteral("layers.1.mlp"));
    EXPECT_EQ(path(proxy, strings({"model", "layers"})).data(LeafCountRole).toULongLong(), 1u);
    proxy.setFilterText(QString());
    EXPECT_EQ(path(proxy, strings({"model", "layers"})).siblingAtColumn(ShapeColumn).data(),
              QStringLiteral("5 entries"));
}

TEST_F(FilterProxyTest, SortsNamesNaturallyAndNumbersNumerically)
{
    const QModelIndex layers = path(proxy, strings({"model", "layers"}));
    ASSERT_TRUE(layers.isValid());
    proxy.sort(NameColumn, Qt::DescendingOrder);
    EXPECT_EQ(childNames(proxy, path(proxy, strings({"model", "layers"}))),
              strings({"10.attn", "1", "0"}));
    proxy.sort(NameColumn, Qt::AscendingOrder);
    EXPECT_EQ(childNames(proxy, path(proxy, strings({"model", "layers"}))),
              strings({"0", "1", "10.attn"}));
    // Groups first by name; at the top level the group "model" leads the leaves.
    EXPECT_EQ(childNames(proxy), strings({"model", "iteration", "scale"}));
    // By size: under model, norm (32 B) < embed (256 B) < layers (2.75 KiB).
    proxy.sort(SizeColumn, Qt::AscendingOrder);
    EXPECT_EQ(childNames(proxy, path(proxy, strings({"model"}))),
              strings({"norm", "embed", "layers"}));
}

TEST_F(FilterProxyTest, SurvivesSourceReset)
{
    proxy.setFilterText(QStringLiteral("mlp"));
    source.setIndex(makeSmallIndex());
    EXPECT_EQ(visibleLeaves(proxy).size(), 2);
    source.clear();
    EXPECT_EQ(proxy.rowCount(), 0);
}

TEST(FilterProxySort, NumberedSiblingsSortByValue)
{
    auto index = std::make_shared<CheckpointIndex>();
    for (int l : {10, 2, 1, 0, 21, 3})
        index->tensors.push_back(
            makeTensor("layers." + std::to_string(l) + ".w", DType::Float32, {1}));
    CheckpointTreeModel source;
    CheckpointFilterProxy proxy;
    QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::Fatal);
    proxy.setSourceModel(&source);
    source.setIndex(index);
    proxy.sort(NameColumn, Qt::AscendingOrder);
    EXPECT_EQ(childNames(proxy, proxy.index(0, 0)), strings({"0", "1", "2", "3", "10", "21"}));
}
