// SPDX-License-Identifier: MIT
#pragma once

#include "snapshots.h"

#include "flattablemodel.h"

namespace shardscope::model {

/**
 * A value comparison's tensors, one row each: tensors not compared first, with why (a comparison
 * that skipped some is no all-clear), then worst first: beyond the tolerance before within,
 * within before identical, larger relative L2 difference first. VerdictRole carries the verdict
 * name, DifferentRole whether it is beyond the tolerance, TensorRole the row's position in
 * ValueDiffResult::tensors (for the histogram and the per-layer plot), SortRole numbers as
 * numbers.
 */
class ValueDiffModel : public FlatTableModel
{
    Q_OBJECT

public:
    enum Column : int {
        NameColumn,
        VerdictColumn,
        DifferingColumn,
        MaxAbsColumn,
        MaxRelColumn,
        RelL2Column,
        CosineColumn,
        UlpColumn,
        FirstDiffColumn,
        DTypeColumn,
        ColumnCount,
    };
    enum Role : int {
        VerdictRole = Qt::UserRole + 300, ///< QString: verdictName()
        DifferentRole,                    ///< bool: some element beyond the tolerance
        TensorRole,                       ///< int: index into ValueDiffResult::tensors
        StoredKeyRole,                    ///< QString: the first side's first stored key
        SortRole,
    };

    explicit ValueDiffModel(QObject *parent = nullptr);

    void setValues(ValuesSnapshot values);
    const ValuesSnapshot &values() const { return m_values; }
    /** The row showing tensor `tensor` (an index into the result's tensors); -1 for none. */
    int rowOfTensor(int tensor) const;

private:
    int rows() const override;
    QVariant cellData(const QModelIndex &index, int role) const override;

    ValuesSnapshot m_values;
    std::vector<uint32_t> m_order; ///< rows → tensors
};

/** "name" or "name (state)": how a compared tensor is named in every view. */
QString valueTensorName(const TensorValueDiff &t);

} // namespace shardscope::model
