// SPDX-License-Identifier: MIT
#include "checkpointfilterproxy.h"

#include "checkpointtreemodel.h"
#include "formatting.h"
#include "loadmarks.h"
#include "naturalcompare.h"
#include "roles.h"

namespace shardscope::model {

CheckpointFilterProxy::CheckpointFilterProxy(QObject *parent)
    : QSortFilterProxyModel(parent)
{
    // Not Qt's recursive filtering: it searches the whole subtree of every group without a
    // match (hundreds of thousands of rows at DeepSeek-V3 scale); computeMatches() accepts a
    // group exactly when a leaf below it matches.
    setRecursiveFilteringEnabled(false);
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
    // Connected before the base class's own handlers, so that the matches are recomputed
    // before it rebuilds its mapping on a reset.
    if (source) {
        connect(source, &QAbstractItemModel::modelReset, this, [this] { computeMatches(); });
        // New load marks change which leaves "problems only" keeps, at every depth, and what a
        // group's matches count.
        connect(source, &QAbstractItemModel::dataChanged, this,
                [this](const QModelIndex &, const QModelIndex &, const QList<int> &roles) {
                    if (!roles.contains(LoadMarkRole) || !isFiltering())
                        return;
                    if (m_problemsOnly)
                        refilter();
                    else
                        computeMatches();
                });
    }
    QSortFilterProxyModel::setSourceModel(source);
    computeMatches();
}

void CheckpointFilterProxy::refilter()
{
    computeMatches();
    invalidateFilter();
}

void CheckpointFilterProxy::computeMatches()
{
    m_accept.clear();
    m_matched.clear();
    const auto *tree = qobject_cast<const CheckpointTreeModel *>(sourceModel());
    if (!tree || !isFiltering())
        return;
    m_accept.assign(tree->nodeCount(), 0);
    m_matched.assign(tree->nodeCount(), {});
    const std::string dtype = m_dtype.toStdString();
    // Each match is counted in its parent, then every group's counts are added to its parent's
    // in one backward pass over the nodes (parents are made before their children): a pass
    // over the nodes in order instead of a walk up from every leaf.
    tree->forEachLeaf([&](const CheckpointTreeModel::LeafInfo &leaf) {
        if (m_problemsOnly && !leaf.problem && leaf.mark < FirstAttentionMark)
            return;
        if (!dtype.empty() && leaf.dtype != dtype)
            return;
        if (!m_matcher.matches(leaf.key))
            return;
        m_accept[leaf.node] = 1;
        const uint32_t parent = tree->parentNode(leaf.node);
        if (parent == CheckpointTreeModel::NoParent)
            return;
        Matched &m = m_matched[parent];
        ++m.entries;
        m.chunks += leaf.chunks;
        m.bytes += leaf.bytes;
        if (leaf.mark > m.mark) {
            m.mark = leaf.mark;
            m.markCount = 1;
        } else if (leaf.mark == m.mark && leaf.mark != LoadMark::None) {
            ++m.markCount;
        }
    });
    for (size_t n = m_matched.size() - 1; n > 0; --n) {
        const Matched &c = m_matched[n];
        if (c.entries == 0)
            continue;
        m_accept[n] = 1; // a group with a match below it: shown, without Qt's recursive search
        const uint32_t parent = tree->parentNode(uint32_t(n));
        if (parent == CheckpointTreeModel::NoParent)
            continue;
        Matched &m = m_matched[parent];
        m.entries += c.entries;
        m.chunks += c.chunks;
        m.bytes += c.bytes;
        if (c.mark > m.mark) {
            m.mark = c.mark;
            m.markCount = c.markCount;
        } else if (c.mark == m.mark && c.mark != LoadMark::None) {
            m.markCount += c.markCount;
        }
    }
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
    return id < m_matched.size() ? m_matched[id] : Matched{};
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
        if (index.column() == LoadColumn)
            return groupLoadText(m.mark, m.markCount);
        break;
    case SortRole: // by what the column shows: the matches' worst mark
        if (index.column() == LoadColumn)
            return uint(m.mark);
        break;
    case LoadMarkRole:
        return int(m.mark);
    case LoadMarkCountRole:
        return int(m.markCount);
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
    // Matched in one pass when the filter changes (computeMatches()): a leaf by its key, a
    // group when a leaf below it matches (the leaves' keys already contain its prefix).
    const quintptr id = idx.internalId();
    return id < m_accept.size() && m_accept[id];
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
