// SPDX-License-Identifier: MIT
#include "checkpointtreemodel_p.h"

#include "formatting.h"

#include <shardscope/checkpoint.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

namespace shardscope::model {

CheckpointTreeModel::CheckpointTreeModel(QObject *parent)
    : QAbstractItemModel(parent)
    , m_tree(std::make_unique<Tree>())
{
    m_tree->nodes.push_back(Node{});
}

CheckpointTreeModel::~CheckpointTreeModel() = default;

void CheckpointTreeModel::setIndex(std::shared_ptr<const CheckpointIndex> index)
{
    adopt(prepare(std::move(index)));
}

void CheckpointTreeModel::adopt(std::shared_ptr<Prepared> prepared)
{
    if (!prepared || !prepared->tree) { // taken already, or none: empty
        setIndex(nullptr);
        return;
    }
    beginResetModel();
    m_index = std::move(prepared->index);
    m_tree = std::move(prepared->tree);
    m_dtypeNames = std::move(prepared->dtypes);
    m_provisional = prepared->provisional;
    endResetModel();
}

bool CheckpointTreeModel::completeIndex(std::shared_ptr<const CheckpointIndex> full)
{
    if (!m_provisional || m_tree->topOnly || !full || !m_index ||
        full->tensors.size() != m_index->tensors.size() ||
        full->objects.size() != m_index->objects.size())
        return false;
    m_index = std::move(full);
    m_provisional = false;
    bindKeys(*m_tree, m_index.get());
    summarise(*m_tree, *m_index);
    if (rowCount() > 0) // the view repaints what it shows; "problems only" filters again
        Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1),
                           {Qt::DisplayRole, Qt::ToolTipRole, SortRole, BytesRole, HasProblemRole,
                            ProblemCountRole});
    return true;
}

void CheckpointTreeModel::forEachLeaf(const std::function<void(const LeafInfo &)> &fn) const
{
    if (!m_index)
        return;
    const Tree &t = *m_tree;
    for (uint32_t id = 1; id < t.nodes.size(); ++id) {
        const Node &n = t.nodes[id];
        if (n.kind == NodeKind::Group || (n.parent == NoNode && id != RootNode))
            continue;
        LeafInfo leaf;
        leaf.node = id;
        if (n.kind == NodeKind::Tensor) {
            const TensorEntry &e = m_index->tensors[size_t(n.entry)];
            leaf.key = e.key;
            leaf.dtype = e.dtypeName.empty() ? dtypeName(e.dtype) : std::string_view(e.dtypeName);
        } else {
            leaf.key = m_index->objects[size_t(n.entry)].key;
        }
        leaf.problem = n.problemCount > 0;
        leaf.mark = t.marks.empty() ? LoadMark::None : t.marks[id];
        leaf.chunks = n.chunks;
        leaf.bytes = n.bytes;
        fn(leaf);
    }
}

uint32_t CheckpointTreeModel::parentNode(uint32_t node) const
{
    const uint32_t p = node < m_tree->nodes.size() ? m_tree->nodes[node].parent : NoNode;
    return p == NoNode ? NoParent : p;
}

size_t CheckpointTreeModel::nodeCount() const
{
    return m_tree->nodes.size();
}

QModelIndex CheckpointTreeModel::index(int row, int column, const QModelIndex &parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount || parent.column() > 0)
        return {};
    if (m_flat) {
        if (parent.isValid() || size_t(row) >= m_tree->flat.size())
            return {};
        return createIndex(row, column, quintptr(m_tree->flat[size_t(row)]));
    }
    const uint32_t p = parent.isValid() ? uint32_t(parent.internalId()) : RootNode;
    if (p >= m_tree->nodes.size())
        return {};
    const Node &pn = m_tree->nodes[p];
    if (uint32_t(row) >= pn.childCount)
        return {};
    return createIndex(row, column, quintptr(m_tree->children[pn.firstChild + uint32_t(row)]));
}

QModelIndex CheckpointTreeModel::parent(const QModelIndex &child) const
{
    if (!child.isValid() || m_flat)
        return {};
    const uint32_t n = uint32_t(child.internalId());
    const uint32_t p = m_tree->nodes[n].parent;
    if (p == RootNode || p == NoNode)
        return {};
    return createIndex(int(m_tree->nodes[p].row), 0, quintptr(p));
}

int CheckpointTreeModel::rowCount(const QModelIndex &parent) const
{
    if (parent.column() > 0)
        return 0;
    if (m_flat)
        return parent.isValid() ? 0 : int(m_tree->flat.size());
    const uint32_t p = parent.isValid() ? uint32_t(parent.internalId()) : RootNode;
    return int(m_tree->nodes[p].childCount);
}

int CheckpointTreeModel::columnCount(const QModelIndex &) const
{
    return ColumnCount;
}

bool CheckpointTreeModel::hasChildren(const QModelIndex &parent) const
{
    // A top-only tree's groups have rows below them, on their way (the view shows them as
    // groups, not as leaves that turn into groups).
    if (m_tree->topOnly && !m_flat && parent.isValid() && parent.column() == 0 &&
        m_tree->nodes[parent.internalId()].kind == NodeKind::Group)
        return true;
    return rowCount(parent) > 0;
}

bool CheckpointTreeModel::isTopOnly() const
{
    return m_tree->topOnly;
}

Qt::ItemFlags CheckpointTreeModel::flags(const QModelIndex &index) const
{
    if (!index.isValid())
        return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (m_tree->nodes[index.internalId()].kind != NodeKind::Group)
        f |= Qt::ItemNeverHasChildren;
    return f;
}

QString CheckpointTreeModel::nodeName(uint32_t node) const
{
    if (m_flat)
        return nodeKey(node);
    const std::string_view n = m_tree->name(node);
    return QString::fromUtf8(n.data(), qsizetype(n.size()));
}

QString CheckpointTreeModel::nodeKey(uint32_t node) const
{
    const Node &n = m_tree->nodes[node];
    if (n.kind == NodeKind::Tensor)
        return QString::fromUtf8(m_index->tensors[size_t(n.entry)].key.data(),
                                 qsizetype(m_index->tensors[size_t(n.entry)].key.size()));
    if (n.kind == NodeKind::Object)
        return QString::fromUtf8(m_index->objects[size_t(n.entry)].key.data(),
                                 qsizetype(m_index->objects[size_t(n.entry)].key.size()));
    std::vector<uint32_t> chain;
    for (uint32_t p = node; p != RootNode && p != NoNode; p = m_tree->nodes[p].parent)
        chain.push_back(p);
    std::string key;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        if (!key.empty())
            key += '.';
        key += m_tree->name(*it);
    }
    return QString::fromStdString(key);
}

QString CheckpointTreeModel::statusText(uint32_t node) const
{
    const Node &n = m_tree->nodes[node];
    if (n.problemCount == 0)
        return {};
    if (n.kind == NodeKind::Group)
        return n.problemCount == 1 ? tr("1 reading problem")
                                   : tr("%1 reading problems").arg(formatCount(n.problemCount));
    const auto range = std::equal_range(
        m_tree->problems.begin(), m_tree->problems.end(), std::make_pair(node, uint32_t(0)),
        [](const auto &a, const auto &b) { return a.first < b.first; });
    QString text = displayText(m_index->problems[range.first->second].message);
    if (n.problemCount > 1)
        text += tr(" (+%1 more)").arg(n.problemCount - 1);
    return text;
}

QString CheckpointTreeModel::statusToolTip(uint32_t node) const
{
    QStringList lines;
    QModelIndex idx = createIndex(int(m_tree->nodes[node].row), 0, quintptr(node));
    for (const Problem *p : problemsAt(idx)) {
        if (lines.size() == 20) {
            lines.push_back(QStringLiteral("…"));
            break;
        }
        lines.push_back(QString::fromStdString(p->toString()));
    }
    return lines.join(QLatin1Char('\n'));
}

std::vector<const Problem *> CheckpointTreeModel::problemsAt(const QModelIndex &index) const
{
    std::vector<const Problem *> out;
    if (!index.isValid() || index.model() != this)
        return out;
    const uint32_t node = uint32_t(index.internalId());
    const auto range = std::equal_range(
        m_tree->problems.begin(), m_tree->problems.end(), std::make_pair(node, uint32_t(0)),
        [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto it = range.first; it != range.second; ++it)
        out.push_back(&m_index->problems[it->second]);
    return out;
}

QVariant CheckpointTreeModel::displayData(uint32_t node, int column) const
{
    const Node &n = m_tree->nodes[node];
    switch (column) {
    case NameColumn:
        if (m_flat)
            return displayText(nodeKey(node).toStdString());
        return displayText(m_tree->name(node));
    case DTypeColumn:
        if (n.kind == NodeKind::Tensor)
            return tensorDTypeName(m_index->tensors[size_t(n.entry)]);
        if (n.kind == NodeKind::Object)
            return tr("object");
        return {};
    case ShapeColumn:
        if (n.kind == NodeKind::Group)
            return n.leaves == 1 ? tr("1 entry") : tr("%1 entries").arg(formatCount(n.leaves));
        if (n.kind == NodeKind::Tensor)
            return formatShape(m_index->tensors[size_t(n.entry)].shape);
        if (n.kind == NodeKind::Object) {
            const ObjectEntry &o = m_index->objects[size_t(n.entry)];
            if (o.value)
                return displayText(o.value->summary(60));
            return o.location ? tr("stored bytes") : QString();
        }
        return {};
    case ChunksColumn:
        if (n.kind == NodeKind::Object || (n.kind == NodeKind::Group && n.chunks == 0))
            return {};
        return formatCount(n.chunks);
    case SizeColumn:
        if (n.kind == NodeKind::Object && n.bytes == 0)
            return {};
        return formatBytes(n.bytes);
    case LoadColumn:
        return loadText(node);
    case StatusColumn:
        return statusText(node);
    default:
        return {};
    }
}

QVariant CheckpointTreeModel::sortData(uint32_t node, int column) const
{
    const Node &n = m_tree->nodes[node];
    switch (column) {
    case NameColumn:
        return nodeName(node);
    case DTypeColumn:
        return displayData(node, column).toString();
    case ShapeColumn:
        return qulonglong(n.numel);
    case ChunksColumn:
        return qulonglong(n.chunks);
    case SizeColumn:
        return qulonglong(n.bytes);
    case LoadColumn:
        return m_tree->marks.empty() ? 0u : uint(m_tree->marks[node]);
    case StatusColumn:
        return uint(n.problemCount);
    default:
        return {};
    }
}

QVariant CheckpointTreeModel::data(const QModelIndex &index, int role) const
{
    if (!index.isValid() || index.model() != this)
        return {};
    const uint32_t node = uint32_t(index.internalId());
    const Node &n = m_tree->nodes[node];
    switch (role) {
    case Qt::DisplayRole:
        return displayData(node, index.column());
    case Qt::ToolTipRole:
        if (index.column() == StatusColumn && n.problemCount > 0 && n.kind != NodeKind::Group)
            return statusToolTip(node);
        if (index.column() == LoadColumn && !m_tree->markOf.empty() && m_tree->markOf[node])
            return describe(m_tree->markSet->marks[m_tree->markOf[node] - 1]);
        if (index.column() == NameColumn)
            return nodeKey(node);
        if (index.column() == SizeColumn && n.kind != NodeKind::Object)
            return tr("%1 bytes").arg(formatCount(n.bytes));
        return {};
    case Qt::TextAlignmentRole:
        if (index.column() == ChunksColumn || index.column() == SizeColumn)
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        return {};
    case KeyRole:
        return nodeKey(node);
    case KindRole:
        return int(n.kind);
    case NumelRole:
        return qlonglong(n.numel);
    case BytesRole:
        return qulonglong(n.bytes);
    case ChunkCountRole:
        return qulonglong(n.chunks);
    case LeafCountRole:
        return qulonglong(n.leaves);
    case LoadMarkRole:
        return m_tree->marks.empty() ? 0 : int(m_tree->marks[node]);
    case LoadMarkCountRole:
        return m_tree->marks.empty() ? 0 : int(m_tree->markCounts[node]);
    case HasProblemRole:
        return n.problemCount > 0;
    case ProblemCountRole:
        return int(n.problemCount);
    case DTypeRole:
        if (n.kind != NodeKind::Tensor)
            return QString();
        return displayData(node, DTypeColumn);
    case EntryIndexRole:
        return int(n.entry);
    case SortRole:
        return sortData(node, index.column());
    default:
        return {};
    }
}

QVariant CheckpointTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return {};
    if (role == Qt::TextAlignmentRole && (section == ChunksColumn || section == SizeColumn))
        return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    if (role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn:
        return tr("Name");
    case DTypeColumn:
        return tr("DType");
    case ShapeColumn:
        return tr("Shape");
    case ChunksColumn:
        return tr("Chunks");
    case SizeColumn:
        return tr("Size");
    case LoadColumn:
        return tr("Load");
    case StatusColumn:
        return tr("Reading");
    default:
        return {};
    }
}

QHash<int, QByteArray> CheckpointTreeModel::roleNames() const
{
    QHash<int, QByteArray> names = QAbstractItemModel::roleNames();
    names.insert(KeyRole, "key");
    names.insert(KindRole, "kind");
    names.insert(NumelRole, "numel");
    names.insert(BytesRole, "bytes");
    names.insert(ChunkCountRole, "chunkCount");
    names.insert(HasProblemRole, "hasProblem");
    names.insert(ProblemCountRole, "problemCount");
    names.insert(DTypeRole, "dtype");
    names.insert(EntryIndexRole, "entryIndex");
    names.insert(SortRole, "sort");
    names.insert(LeafCountRole, "leafCount");
    names.insert(LoadMarkRole, "loadMark");
    names.insert(LoadMarkCountRole, "loadMarkCount");
    return names;
}

QModelIndex CheckpointTreeModel::indexForKey(const QString &key) const
{
    const std::string k = key.toStdString();
    const uint32_t leaf = m_tree->leafByKey.find(k);
    if (leaf == 0)
        return {};
    const Node &n = m_tree->nodes[leaf];
    return createIndex(int(m_flat ? n.flatRow : n.row), 0, quintptr(leaf));
}

void CheckpointTreeModel::setFlat(bool flat)
{
    if (flat == m_flat)
        return;
    beginResetModel();
    m_flat = flat;
    endResetModel();
}

const TensorEntry *CheckpointTreeModel::tensorAt(const QModelIndex &index) const
{
    if (!index.isValid() || index.model() != this)
        return nullptr;
    const Node &n = m_tree->nodes[index.internalId()];
    return n.kind == NodeKind::Tensor && !m_provisional ? &m_index->tensors[size_t(n.entry)]
                                                        : nullptr;
}

const ObjectEntry *CheckpointTreeModel::objectAt(const QModelIndex &index) const
{
    if (!index.isValid() || index.model() != this)
        return nullptr;
    const Node &n = m_tree->nodes[index.internalId()];
    return n.kind == NodeKind::Object && !m_provisional ? &m_index->objects[size_t(n.entry)]
                                                        : nullptr;
}

} // namespace shardscope::model
