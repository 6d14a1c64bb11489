// SPDX-License-Identifier: MIT
#pragma once

#include "keymatcher.h"

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
    /** The problems shown (those whose key the filter matches), however folded. */
    int problemCount() const;
    /** Every problem of the checkpoint, filtered or not. */
    int totalProblemCount() const;
    /** Only the problems whose key matches, as the tree's filter text matches keys. */
    void setKeyFilter(const QString &text);

    QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override;
    QModelIndex parent(const QModelIndex &child) const override;
    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    const Problem *problemOf(const QModelIndex &index) const;

    void regroup();

    std::shared_ptr<const CheckpointIndex> m_index;
    KeyMatcher m_matcher;
    std::vector<Problem> m_shown; ///< the problems the filter matches
    std::vector<ProblemGroup> m_groups;
};

} // namespace shardscope::model
