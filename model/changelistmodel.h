// SPDX-License-Identifier: MIT
#pragma once

#include "snapshots.h"

#include "flattablemodel.h"

namespace shardscope::model {

/**
 * Two checkpoints' structure side by side: every key one side has and the other lacks, renamed
 * by a rule, or stored with another shape or dtype (CheckpointDiff::changes), in the diff's
 * order. ChangeKindRole carries the kind's name; ChangedRole is false for a rename a rule maps
 * (the same tensor under the name the other side uses).
 */
class ChangeListModel : public FlatTableModel
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

private:
    int rows() const override;
    QVariant cellData(const QModelIndex &index, int role) const override;

    CompareSnapshot m_diff;
};

} // namespace shardscope::model
