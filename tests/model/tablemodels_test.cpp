// SPDX-License-Identifier: MIT
#include "testutil.h"

#include "model/chunktablemodel.h"
#include "model/formatting.h"
#include "model/problemlistmodel.h"
#include "model/roles.h"

#include <QAbstractItemModelTester>

#include <shardscope/dtype.h>

#include <gtest/gtest.h>

using namespace shardscope;
using namespace shardscope::model;
using namespace shardscope::model::test;

TEST(ChunkTableModel, ShowsOneRowPerChunk)
{
    ChunkTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    EXPECT_EQ(model.rowCount(), 0);

    auto index = makeSmallIndex();
    model.setTensor(index, 0); // model.embed.weight: 2 chunks of [8, 8] in file 1
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(model.columnCount(), int(ChunkTableModel::ColumnCount));
    auto cell = [&](int row, int col) { return model.index(row, col).data().toString(); };
    EXPECT_EQ(cell(1, ChunkTableModel::IndexColumn), QStringLiteral("1"));
    EXPECT_EQ(cell(1, ChunkTableModel::OffsetsColumn), QStringLiteral("[8, 0]"));
    EXPECT_EQ(cell(1, ChunkTableModel::SizesColumn), QStringLiteral("[8, 8]"));
    EXPECT_EQ(cell(1, ChunkTableModel::FileColumn), QStringLiteral("__1_0.distcp"));
    EXPECT_EQ(cell(1, ChunkTableModel::ByteOffsetColumn), QStringLiteral("4,096"));
    EXPECT_EQ(cell(1, ChunkTableModel::LengthColumn), QStringLiteral("4.00 KiB"));
    EXPECT_EQ(model.index(1, ChunkTableModel::ByteOffsetColumn).data(SortRole).toULongLong(),
              4096u);
    // What the chunk's elements take, beside what is stored; the tooltip says why they differ.
    const TensorEntry &t = index->tensors[0];
    const uint64_t data = 8 * 8 * uint64_t(elementSize(t.dtype));
    EXPECT_EQ(cell(1, ChunkTableModel::DataColumn), formatBytes(data));
    EXPECT_EQ(model.index(1, ChunkTableModel::DataColumn).data(SortRole).toULongLong(), data);
    const QString tip =
        model.index(1, ChunkTableModel::LengthColumn).data(Qt::ToolTipRole).toString();
    EXPECT_TRUE(tip.contains(formatCount(t.chunks[1].length))) << tip.toStdString();
    if (t.chunks[1].encoding == Encoding::TorchSaveArchive && t.chunks[1].length > data) {
        EXPECT_TRUE(tip.contains(QStringLiteral("torch.save archive"))) << tip.toStdString();
    }

    model.setTensor(index, 7); // scale: a scalar, one chunk
    ASSERT_EQ(model.rowCount(), 1);
    EXPECT_EQ(cell(0, ChunkTableModel::OffsetsColumn), QStringLiteral("[]"));
    model.setTensor(index, 99);
    EXPECT_EQ(model.rowCount(), 0);
    EXPECT_EQ(model.tensor(), nullptr);
}

// The problems list follows the tree's filter text (substring or glob on the key).
TEST(ProblemListModel, FollowsTheKeyFilter)
{
    ProblemListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setIndex(makeSmallIndex());
    EXPECT_EQ(model.problemCount(), 2);
    model.setKeyFilter(QStringLiteral("mlp"));
    EXPECT_EQ(model.problemCount(), 1);
    EXPECT_EQ(model.totalProblemCount(), 2);
    EXPECT_EQ(model.index(0, ProblemListModel::KeyColumn).data().toString(),
              QStringLiteral("model.layers.0.mlp.weight"));
    model.setKeyFilter(QStringLiteral("layers.*.attn"));
    EXPECT_EQ(model.problemCount(), 0);
    model.setKeyFilter(QString());
    EXPECT_EQ(model.problemCount(), 2);
}

TEST(ProblemListModel, ListsProblems)
{
    ProblemListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setIndex(makeSmallIndex());
    ASSERT_EQ(model.rowCount(), 2);
    auto cell = [&](int row, int col) { return model.index(row, col).data().toString(); };
    EXPECT_EQ(cell(0, ProblemListModel::KeyColumn), QStringLiteral("model.layers.0.mlp.weight"));
    EXPECT_EQ(cell(0, ProblemListModel::OffsetColumn), QStringLiteral("8,192"));
    EXPECT_EQ(cell(1, ProblemListModel::OffsetColumn), QString());
    EXPECT_EQ(cell(0, ProblemListModel::EffectColumn), QStringLiteral("raises"));
    EXPECT_EQ(cell(1, ProblemListModel::EffectColumn), QString());
    EXPECT_EQ(cell(1, ProblemListModel::MessageColumn),
              QStringLiteral("unreferenced file __9_0.distcp"));
    EXPECT_EQ(model.index(0, 0).data(KeyRole).toString(),
              QStringLiteral("model.layers.0.mlp.weight"));
    ASSERT_NE(model.problemAt(1), nullptr);
    EXPECT_EQ(model.problemAt(2), nullptr);
    model.clear();
    EXPECT_EQ(model.rowCount(), 0);
}

// A missing data file breaks every key it held: one row for the file, expanding to its keys.
TEST(ProblemListModel, FoldsAFloodIntoOneExpandableRow)
{
    auto index = std::make_shared<CheckpointIndex>();
    for (int i = 0; i < 300; ++i)
        index->problems.push_back({"model.layers." + std::to_string(i) + ".weight",
                                   "/ckpt/__3_0.distcp", std::nullopt, "data file is missing",
                                   Problem::Effect::Unreadable});
    index->problems.push_back({"", ".metadata", std::nullopt, "unreferenced file __9_0.distcp"});
    ProblemListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setIndex(index);
    ASSERT_EQ(model.rowCount(), 2);
    EXPECT_EQ(model.problemCount(), 301);
    const QModelIndex group = model.index(0, 0);
    auto cell = [&](const QModelIndex &parent, int row, int col) {
        return model.index(row, col, parent).data().toString();
    };
    EXPECT_EQ(cell({}, 0, ProblemListModel::KeyColumn), QStringLiteral("300 keys"));
    EXPECT_EQ(cell({}, 0, ProblemListModel::FileColumn), QStringLiteral("/ckpt/__3_0.distcp"));
    EXPECT_EQ(cell({}, 0, ProblemListModel::EffectColumn), QStringLiteral("raises"));
    EXPECT_EQ(cell({}, 0, ProblemListModel::MessageColumn), QStringLiteral("data file is missing"));
    EXPECT_EQ(model.problemAt(0), nullptr) << "a group is no one problem";
    ASSERT_EQ(model.rowCount(group), 300);
    EXPECT_EQ(cell(group, 299, ProblemListModel::KeyColumn),
              QStringLiteral("model.layers.299.weight"));
    EXPECT_EQ(model.index(299, 0, group).data(KeyRole).toString(),
              QStringLiteral("model.layers.299.weight"));
    EXPECT_EQ(model.parent(model.index(5, 2, group)), group);
    // A problem of its own is a plain row, without children.
    EXPECT_EQ(cell({}, 1, ProblemListModel::MessageColumn),
              QStringLiteral("unreferenced file __9_0.distcp"));
    EXPECT_EQ(model.rowCount(model.index(1, 0)), 0);
    ASSERT_NE(model.problemAt(1), nullptr);
}
