// SPDX-License-Identifier: MIT
#include "checkpointfilterproxy.h"

#include "naturalcompare.h"
#include "roles.h"

namespace shardscope::model {

CheckpointFilterProxy::CheckpointFilterProxy(QObject *parent)
    : QSortFilterProxyModel(parent)
{
    setRecursiveFilteringEnabled(true);
    setAutoAcceptChildRows(false);
    setSortRole(SortRole);
    setDynamicSortFilter(true);
}

bool CheckpointFilterProxy::isFiltering() const
{
    return !m_text.isEmpty() || !m_dtype.isEmpty() || m_problemsOnly;
}

void CheckpointFilterProxy::setFilterText(const QString &text)
{
    const QString t = text.trimmed();
    if (t == m_text)
        return;
    m_text = t;
    m_isGlob = t.contains(QLatin1Char('*')) || t.contains(QLatin1Char('?')) ||
               t.contains(QLatin1Char('['));
    if (m_isGlob) {
        m_glob = QRegularExpression::fromWildcard(t, Qt::CaseInsensitive,
                                                  QRegularExpression::UnanchoredWildcardConversion);
        m_glob.optimize();
    }
    invalidateFilter();
}

void CheckpointFilterProxy::setDTypeFilter(const QString &dtype)
{
    if (dtype == m_dtype)
        return;
    m_dtype = dtype;
    invalidateFilter();
}

void CheckpointFilterProxy::setProblemsOnly(bool on)
{
    if (on == m_problemsOnly)
        return;
    m_problemsOnly = on;
    invalidateFilter();
}

bool CheckpointFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex &sourceParent) const
{
    if (!isFiltering())
        return true;
    const QModelIndex idx = sourceModel()->index(sourceRow, 0, sourceParent);
    // Groups are never accepted on their own: recursive filtering shows them when a leaf below
    // them matches, and the leaves' keys already contain the group's prefix.
    if (NodeKind(idx.data(KindRole).toInt()) == NodeKind::Group)
        return false;
    if (m_problemsOnly && !idx.data(HasProblemRole).toBool())
        return false;
    if (!m_dtype.isEmpty() && idx.data(DTypeRole).toString() != m_dtype)
        return false;
    if (!m_text.isEmpty()) {
        const QString key = idx.data(KeyRole).toString();
        if (m_isGlob ? !m_glob.match(key).hasMatch() : !key.contains(m_text, Qt::CaseInsensitive))
            return false;
    }
    return true;
}

bool CheckpointFilterProxy::lessThan(const QModelIndex &left, const QModelIndex &right) const
{
    // Groups before leaves by name, as file managers list folders first.
    if (left.column() == NameColumn) {
        const bool lg = NodeKind(left.data(KindRole).toInt()) == NodeKind::Group;
        const bool rg = NodeKind(right.data(KindRole).toInt()) == NodeKind::Group;
        if (lg != rg)
            return lg;
    }
    const QVariant l = left.data(SortRole);
    const QVariant r = right.data(SortRole);
    if (l.typeId() == QMetaType::QString && r.typeId() == QMetaType::QString)
        return naturalCompare(l.toString(), r.toString()) < 0;
    return QSortFilterProxyModel::lessThan(left, right);
}

} // namespace shardscope::model
