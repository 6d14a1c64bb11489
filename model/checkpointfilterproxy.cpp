// SPDX-License-Identifier: MIT
#include "checkpointfilterproxy.h"

#include "formatting.h"
#include "loadmarks.h"
#include "naturalcompare.h"
#include "roles.h"

namespace shardscope::model {

CheckpointFilterProxy::CheckpointFilterProxy(QObject *parent)
    : QSortFilterProxyModel(parent)
{
    // Whoever reads a group while the rows change (a view, a tester) must not leave a count
    // of the rows before the change in the cache.
    auto forget = [this] { m_matched.clear(); };
    connect(this, &QAbstractItemModel::rowsInserted, this, forget);
    connect(this, &QAbstractItemModel::rowsRemoved, this, forget);
    connect(this, &QAbstractItemModel::layoutChanged, this, forget);
    connect(this, &QAbstractItemModel::modelReset, this, forget);
    setRecursiveFilteringEnabled(true);
    setAutoAcceptChildRows(false);
    setSortRole(SortRole);
    setDynamicSortFilter(true);
}

bool CheckpointFilterProxy::isFiltering() const
{
    return !m_matcher.isEmpty() || !m_dtype.isEmpty() || m_problemsOnly;
}

void CheckpointFilterProxy::setSourceModel(QAbstractItemModel *source)
{
    if (sourceModel())
        disconnect(sourceModel(), nullptr, this, nullptr);
    QSortFilterProxyModel::setSourceModel(source);
    if (!source)
        return;
    connect(source, &QAbstractItemModel::modelReset, this, [this] { m_matched.clear(); });
    // New load marks change which leaves "problems only" keeps, at every depth.
    connect(source, &QAbstractItemModel::dataChanged, this,
            [this](const QModelIndex &, const QModelIndex &, const QList<int> &roles) {
                if (m_problemsOnly && roles.contains(LoadMarkRole))
                    refilter();
            });
}

void CheckpointFilterProxy::refilter()
{
    m_matched.clear();
    invalidateFilter();
    m_matched.clear();
}

void CheckpointFilterProxy::setFilterText(const QString &text)
{
    if (m_matcher.setText(text))
        refilter();
}

void CheckpointFilterProxy::setDTypeFilter(const QString &dtype)
{
    if (dtype == m_dtype)
        return;
    m_dtype = dtype;
    refilter();
}

void CheckpointFilterProxy::setProblemsOnly(bool on)
{
    if (on == m_problemsOnly)
        return;
    m_problemsOnly = on;
    refilter();
}

CheckpointFilterProxy::Matched CheckpointFilterProxy::matched(const QModelIndex &group) const
{
    const quintptr id = mapToSource(group).internalId();
    if (auto it = m_matched.constFind(id); it != m_matched.constEnd())
        return *it;
    Matched m;
    for (int r = 0, n = rowCount(group); r < n; ++r) {
        const QModelIndex child = index(r, 0, group);
        if (NodeKind(child.data(KindRole).toInt()) == NodeKind::Group) {
            const Matched c = matched(child);
            m.entries += c.entries;
            m.chunks += c.chunks;
            m.bytes += c.bytes;
        } else {
            const QModelIndex s = mapToSource(child);
            ++m.entries;
            m.chunks += s.data(ChunkCountRole).toULongLong();
            m.bytes += s.data(BytesRole).toULongLong();
        }
    }
    m_matched.insert(id, m);
    return m;
}

QVariant CheckpointFilterProxy::data(const QModelIndex &index, int role) const
{
    if (!isFiltering() || !index.isValid() ||
        NodeKind(QSortFilterProxyModel::data(index, KindRole).toInt()) != NodeKind::Group)
        return QSortFilterProxyModel::data(index, role);
    const Matched m = matched(index.siblingAtColumn(NameColumn));
    switch (role) {
    case Qt::DisplayRole:
        if (index.column() == ShapeColumn)
            return tr("%1 of %2 entries")
                .arg(formatCount(m.entries),
                     formatCount(QSortFilterProxyModel::data(index, LeafCountRole).toULongLong()));
        if (index.column() == ChunksColumn)
            return m.chunks ? formatCount(m.chunks) : QVariant();
        if (index.column() == SizeColumn)
            return formatBytes(m.bytes);
        break;
    case LeafCountRole:
        return qulonglong(m.entries);
    case ChunkCountRole:
        return qulonglong(m.chunks);
    case BytesRole:
        return qulonglong(m.bytes);
    default:
        break;
    }
    return QSortFilterProxyModel::data(index, role);
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
    if (m_problemsOnly && !idx.data(HasProblemRole).toBool() &&
        idx.data(LoadMarkRole).toInt() < int(FirstAttentionMark))
        return false;
    if (!m_dtype.isEmpty() && idx.data(DTypeRole).toString() != m_dtype)
        return false;
    if (!m_matcher.isEmpty() && !m_matcher.matches(idx.data(KeyRole).toString()))
        return false;
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
