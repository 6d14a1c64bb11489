// SPDX-License-Identifier: MIT
#pragma once

#include "snapshots.h"

#include "flattablemodel.h"

namespace shardscope::model {

/**
 * A load diff's entries, one row each (every expected parameter, its optimizer states and the
 * stored keys nothing reads): name, status, what the real load does with it, where it is stored,
 * the reason. Problems first in the order the diff lists them; read-only over the snapshot.
 * DiffStatusRole carries the status name, FillsRole whether the real load fills it, so that a
 * view colours and marks them (not by colour alone) and a proxy filters by status.
 */
class DiffListModel : public FlatTableModel
{
    Q_OBJECT

public:
    enum Column : int {
        NameColumn,
        StatusColumn,
        LoadColumn,
        StoredColumn,
        ReasonColumn,
        ColumnCount,
    };
    enum Role : int {
        DiffStatusRole = Qt::UserRole + 100, ///< QString: statusName(), or "unconsumed"
        FillsRole,                           ///< bool: the real load fills it
        ProblemRole,                         ///< bool: a row the load diff calls a problem
        FixRole,                             ///< QString: the fix, if any
        SourcesRole,                         ///< QString: stored keys and the rows they fill
        KeptAtInitRole,                      ///< bool: a partial load silently keeps it
        StoredKeyRole, ///< QString: the first stored key it draws from, else the first that
                       ///< holds its data unread (kept at init); empty when nothing is stored
    };

    explicit DiffListModel(QObject *parent = nullptr);

    /** Replaces the contents (model reset); null empties it. */
    void setDiff(DiffSnapshot diff);
    const DiffSnapshot &diff() const { return m_diff; }
    /** The first row at or after `from` that ProblemRole or KeptAtInitRole marks; -1 when
     *  none (a pass over the entries, no QVariant per row). */
    int nextProblemRow(int from) const;

private:
    int rows() const override;
    QVariant cellData(const QModelIndex &index, int role) const override;

    DiffSnapshot m_diff;
    std::vector<std::string_view> m_keptAtInit; ///< sorted, views into the snapshot
};

} // namespace shardscope::model
