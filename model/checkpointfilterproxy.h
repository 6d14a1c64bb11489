// SPDX-License-Identifier: MIT
#pragma once

#include "keymatcher.h"
#include "loadmarks.h"

#include <QSortFilterProxyModel>
#include <vector>

namespace shardscope::model {

/**
 * Filters and sorts a CheckpointTreeModel (no other source). When a criterion changes, one pass
 * over the model's leaves (no QVariant or QString per row: a keystroke at DeepSeek-V3 scale
 * tests 650,000 keys) decides which match, on their key, dtype, problems and load mark ("problems
 * only" keeps what the reader flagged and what the load misses or gets wrong), and sums each
 * group's matches for the "N of M entries" it shows. A group stays visible while any leaf below
 * it matches (recursive filtering). With no criterion set every row is accepted without looking.
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

    QString filterText() const { return m_matcher.text(); }
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    void setSourceModel(QAbstractItemModel *source) override;
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
    struct Matched
    {
        quint64 entries = 0, chunks = 0, bytes = 0;
        LoadMark mark = LoadMark::None; ///< the worst mark of the matches
        quint64 markCount = 0;          ///< matches with that mark
    };
    /** The matching entries below a group of this proxy. */
    Matched matched(const QModelIndex &group) const;
    void refilter();
    /** One pass over a CheckpointTreeModel's leaves: which match, and the sums per group. */
    void computeMatches();

    KeyMatcher m_matcher;
    /** By source node (internalId), while filtering a CheckpointTreeModel: leaves that match
     *  (1), and each group's matched entries, chunks and bytes. */
    std::vector<uint8_t> m_accept;
    std::vector<Matched> m_matched;
    QString m_dtype;
    bool m_problemsOnly = false;
};

} // namespace shardscope::model
