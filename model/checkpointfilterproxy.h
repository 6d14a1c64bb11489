// SPDX-License-Identifier: MIT
#pragma once

#include <QRegularExpression>
#include <QSortFilterProxyModel>

namespace shardscope::model {

/**
 * Filters and sorts a CheckpointTreeModel. Leaves are matched on their typed roles (KeyRole,
 * DTypeRole, HasProblemRole); a group stays visible while any leaf below it matches (recursive
 * filtering). With no criterion set every row is accepted without looking at it.
 *
 * Filter text is a case-insensitive substring of the full key, or a glob (`*`, `?`, `[...]`)
 * matched anywhere in the key. Sorting reads SortRole: names compare naturally ("layers.9"
 * before "layers.10", see naturalCompare()) with groups before leaves, numbers numerically.
 */
class CheckpointFilterProxy : public QSortFilterProxyModel
{
    Q_OBJECT

public:
    explicit CheckpointFilterProxy(QObject *parent = nullptr);

    QString filterText() const { return m_text; }
    QString dtypeFilter() const { return m_dtype; }
    bool problemsOnly() const { return m_problemsOnly; }
    /** Whether any criterion is set. */
    bool isFiltering() const;

public Q_SLOTS:
    void setFilterText(const QString &text);
    /** Only tensors of this torch dtype name; empty for all (objects are hidden while set). */
    void setDTypeFilter(const QString &dtype);
    void setProblemsOnly(bool on);

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex &sourceParent) const override;
    bool lessThan(const QModelIndex &left, const QModelIndex &right) const override;

private:
    QString m_text;
    QRegularExpression m_glob; ///< valid only when m_text holds a wildcard
    bool m_isGlob = false;
    QString m_dtype;
    bool m_problemsOnly = false;
};

} // namespace shardscope::model
