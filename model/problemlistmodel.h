// SPDX-License-Identifier: MIT
#pragma once

#include <QAbstractItemModel>

#include <shardscope/session.h>

#include <memory>
#include <vector>

namespace shardscope::model {

/**
 * CheckpointIndex::problems folded by cause and file (shardscope::groupProblems): a problem of
 * its own is a row (key, file, byte offset, what it does to a load, message); a group of many is
 * one row ("7,200 keys", the file, the cause) whose children are its problems, so that a missing
 * data file is one expandable row, not thousands of identical ones.
 */
class ProblemListModel : public QAbstractItemModel
{
    Q_OBJECT

public:
    enum Column : int {
        KeyColumn,
        FileColumn,
        OffsetColumn,
        EffectColumn,
        MessageColumn,
        ColumnCount,
    };

    explicit ProblemListModel(QObject *parent = nullptr);
    ~ProblemListModel() override;

    void setIndex(std::shared_ptr<const CheckpointIndex> index);
    void clear() { setIndex(nullptr); }
    /** The problem of a top-level row that holds one (a group of one); null for a group. */
    const Problem *problemAt(int row) const;
    /** Every problem, however folded. */
    int problemCount() const;

    QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override;
    QModelIndex parent(const QModelIndex &child) const override;
    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    const Problem *problemOf(const QModelIndex &index) const;

    std::shared_ptr<const CheckpointIndex> m_index;
    std::vector<ProblemGroup> m_groups;
};

} // namespace shardscope::model
