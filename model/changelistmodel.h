// SPDX-License-Identifier: MIT
#pragma once

#include "backendrunner.h"

#include <QAbstractTableModel>

namespace shardscope::model {

/**
 * Two checkpoints' structure side by side: every key one side has and the other lacks, renamed
 * by a rule, or stored with another shape or dtype (CheckpointDiff::changes), in the diff's
 * order. ChangeKindRole carries the kind's name; ChangedRole is false for a rename a rule maps
 * (the same tensor under the name the other side uses).
 */
class ChangeListModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column : int { KindColumn, FirstColumn, SecondColumn, DetailColumn, ColumnCount };
    enum Role : int {
        ChangeKindRole = Qt::UserRole + 400, ///< QString: changeName()
        ChangedRole,                         ///< bool: a real change (not a mapped rename)
        FirstKeyRole, ///< QString: the first checkpoint's key as stored (empty when added)
    };

    explicit ChangeListModel(QObject *parent = nullptr);

    void setComparison(CompareSnapshot diff);
    const CompareSnapshot &comparison() const { return m_diff; }

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    CompareSnapshot m_diff;
};

} // namespace shardscope::model
