// SPDX-License-Identifier: MIT
#include "problemlistmodel.h"

#include "diffchoices.h"
#include "formatting.h"
#include "roles.h"

#include <algorithm>

namespace shardscope::model {

namespace {

QString effectText(Problem::Effect e)
{
    switch (e) {
    case Problem::Effect::Unreadable:
        return ProblemListModel::tr("raises");
    case Problem::Effect::Holes:
        return ProblemListModel::tr("leaves holes");
    case Problem::Effect::Note:
        return QString();
    }
    return {};
}

QString storedAs(const DiffEntry &e)
{
    if (!e.sources.empty())
        return QString::fromStdString(e.sources.front().key);
    if (!e.unreadKeys.empty())
        return QString::fromStdString(e.unreadKeys.front());
    return {};
}

} // namespace

// Top-level rows carry internal id 0: the load's groups, then the reading's; a group's children
// carry the group's row + 1.

ProblemListModel::ProblemListModel(QObject *parent)
    : QAbstractItemModel(parent)
{}

ProblemListModel::~ProblemListModel() = default;

void ProblemListModel::setIndex(std::shared_ptr<const CheckpointIndex> index)
{
    beginResetModel();
    m_index = std::move(index);
    regroup();
    endResetModel();
}

void ProblemListModel::setKeyFilter(const QString &text)
{
    if (!m_matcher.setText(text))
        return;
    if (m_deferred && m_diff) { // tens of thousands to fold again: once it is looked at
        m_stale = true;
        return;
    }
    beginResetModel();
    regroup();
    endResetModel();
}

void ProblemListModel::setFolded(FoldedProblemsSnapshot folded)
{
    if (!m_diff)
        return;
    beginResetModel();
    m_folded = std::move(folded);
    regroup();
    endResetModel();
}

void ProblemListModel::setDeferred(bool deferred)
{
    m_deferred = deferred;
    if (!deferred && std::exchange(m_stale, false)) {
        beginResetModel();
        regroup();
        endResetModel();
    }
}

void ProblemListModel::setDiff(DiffSnapshot diff, FoldedProblemsSnapshot folded)
{
    beginResetModel();
    m_diff = std::move(diff);
    m_folded = m_diff ? std::move(folded) : nullptr;
    m_keptAtInit.clear();
    if (m_diff)
        for (const std::string &k : m_diff->outcome.keptAtInit)
            m_keptAtInit.push_back(k);
    std::sort(m_keptAtInit.begin(), m_keptAtInit.end());
    regroup();
    endResetModel();
}

int ProblemListModel::totalProblemCount() const
{
    int n = m_index ? int(m_index->problems.size()) : 0;
    if (m_diff)
        n += int(shardscope::model::loadProblemCount(*m_diff));
    return n;
}

void ProblemListModel::regroup()
{
    m_shown.clear();
    if (m_index)
        for (const Problem &p : m_index->problems)
            if (m_matcher.matches(QString::fromStdString(p.key)))
                m_shown.push_back(p);
    m_groups = groupProblems(m_shown);
    m_loadShown.clear();
    m_loadGroups.clear();
    if (!m_diff || !m_folded)
        return;
    if (m_matcher.isEmpty()) { // folded already, off the GUI thread
        m_loadShown = m_folded->entries;
        m_loadGroups = m_folded->groups;
        return;
    }
    for (size_t i : m_folded->entries) {
        const DiffEntry &e = m_diff->entries[i];
        if (m_matcher.matches(QString::fromStdString(e.name)) || m_matcher.matches(storedAs(e)))
            m_loadShown.push_back(i);
    }
    m_loadGroups = foldDiffEntries(*m_diff, m_loadShown);
}

const Problem *ProblemListModel::problemAt(int row) const
{
    const int r = row - int(m_loadGroups.size());
    if (r < 0 || size_t(r) >= m_groups.size() || m_groups[size_t(r)].members.size() != 1)
        return nullptr;
    return &m_shown[m_groups[size_t(r)].members.front()];
}

QModelIndex ProblemListModel::index(int row, int column, const QModelIndex &parent) const
{
    if (!hasIndex(row, column, parent))
        return {};
    return createIndex(row, column, parent.isValid() ? quintptr(parent.row() + 1) : quintptr(0));
}

QModelIndex ProblemListModel::parent(const QModelIndex &child) const
{
    if (!child.isValid() || child.internalId() == 0)
        return {};
    return createIndex(int(child.internalId() - 1), 0, quintptr(0));
}

int ProblemListModel::rowCount(const QModelIndex &parent) const
{
    if (!parent.isValid())
        return int(m_loadGroups.size() + m_groups.size());
    if (parent.internalId() != 0 || parent.column() != 0)
        return 0;
    const size_t row = size_t(parent.row());
    const size_t members = row < m_loadGroups.size()
                               ? m_loadGroups[row].entries.size()
                               : m_groups[row - m_loadGroups.size()].members.size();
    return members > 1 ? int(members) : 0;
}

int ProblemListModel::columnCount(const QModelIndex &) const
{
    return ColumnCount;
}

const Problem *ProblemListModel::problemOf(const QModelIndex &index) const
{
    if (index.internalId() != 0)
        return &m_shown[m_groups[index.internalId() - 1 - m_loadGroups.size()]
                            .members[size_t(index.row())]];
    return problemAt(index.row());
}

// A row of the load's problems: a group (several entries folded) or one entry.
QVariant ProblemListModel::loadData(const QModelIndex &index, int role) const
{
    const bool child = index.internalId() != 0;
    const DiffEntryGroup &g =
        m_loadGroups[child ? size_t(index.internalId() - 1) : size_t(index.row())];
    const bool group = !child && g.entries.size() > 1;
    const DiffEntry &e =
        m_diff->entries[child ? g.entries[size_t(index.row())] : g.entries.front()];
    const bool kept =
        std::binary_search(m_keptAtInit.begin(), m_keptAtInit.end(), std::string_view(e.name));
    const std::string_view status = statusName(e.status);
    const QString statusText = QString::fromUtf8(status.data(), qsizetype(status.size()));
    const QString effect = kept               ? tr("silently kept at initial values")
                           : e.wrongSource    ? tr("filled from the wrong key")
                           : !e.realLoadFills ? tr("not filled (%1)").arg(statusText)
                                              : tr("filled (%1)").arg(statusText);
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case KeyColumn:
            return group ? tr("%1 (%2)").arg(displayText(g.pattern),
                                             countOf(g.entries.size(), "entry", "entries"))
                         : displayText(e.name);
        case FileColumn:
            return group ? QString() : displayText(storedAs(e).toStdString());
        case EffectColumn:
            return effect;
        case MessageColumn:
            return displayText(group ? g.reason : e.reason);
        default:
            return QString();
        }
    case Qt::ToolTipRole:
        if (index.column() == MessageColumn && !(group ? g.fix : e.fix).empty())
            return tr("%1\nFix: %2")
                .arg(displayText(group ? g.reason : e.reason), displayText(group ? g.fix : e.fix));
        return data(index, Qt::DisplayRole);
    case KeyRole: // the tree's row: where it is stored
        return storedAs(e);
    case SortRole:
        return data(index, Qt::DisplayRole);
    default:
        return {};
    }
}

QVariant ProblemListModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const bool load = index.internalId() != 0 ? index.internalId() - 1 < m_loadGroups.size()
                                              : size_t(index.row()) < m_loadGroups.size();
    if (load)
        return loadData(index, role);
    const Problem *one = problemOf(index);
    if (!one) { // a group of many
        const ProblemGroup &g = m_groups[size_t(index.row()) - m_loadGroups.size()];
        const Problem &first = m_shown[g.members.front()];
        switch (role) {
        case Qt::DisplayRole:
            switch (index.column()) {
            case KeyColumn:
                return tr("%1 keys").arg(formatCount(g.members.size()));
            case FileColumn:
                return displayText(g.file);
            case EffectColumn:
                return effectText(g.effect);
            case MessageColumn:
                return displayText(g.cause);
            default:
                return QString();
            }
        case Qt::ToolTipRole:
            return displayText(g.headline(m_shown));
        case KeyRole: // activating a group goes to its first key
            return QString::fromStdString(first.key);
        case SortRole:
            if (index.column() == OffsetColumn)
                return qulonglong(0);
            return data(index, Qt::DisplayRole);
        default:
            return {};
        }
    }
    const Problem &p = *one;
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case KeyColumn:
            return displayText(p.key);
        case FileColumn:
            return displayText(p.file);
        case OffsetColumn:
            return p.offset ? formatCount(*p.offset) : QString();
        case EffectColumn:
            return effectText(p.effect);
        case MessageColumn:
            return displayText(p.message);
        default:
            return {};
        }
    case Qt::ToolTipRole:
        if (index.column() == EffectColumn && p.effect != Problem::Effect::Note)
            return p.effect == Problem::Effect::Unreadable
                       ? tr("Reading this key's data fails: a load that asks for it raises")
                       : tr("Its chunks leave part of the tensor uncovered: a load finishes and "
                            "leaves that part at its initial values");
        return QString::fromStdString(p.toString());
    case Qt::TextAlignmentRole:
        if (index.column() == OffsetColumn)
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        return {};
    case KeyRole:
        return QString::fromStdString(p.key);
    case SortRole:
        if (index.column() == OffsetColumn)
            return p.offset ? qulonglong(*p.offset) : qulonglong(0);
        return data(index, Qt::DisplayRole);
    default:
        return {};
    }
}

QVariant ProblemListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::TextAlignmentRole && section == OffsetColumn)
        return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case KeyColumn:
        return tr("Key");
    case FileColumn:
        return tr("Stored in");
    case OffsetColumn:
        return tr("Offset");
    case EffectColumn:
        return tr("What the load does");
    case MessageColumn:
        return tr("Why");
    default:
        return {};
    }
}

} // namespace shardscope::model
