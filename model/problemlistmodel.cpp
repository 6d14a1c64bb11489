// SPDX-License-Identifier: MIT
#include "problemlistmodel.h"

#include "formatting.h"
#include "roles.h"

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

} // namespace

// Top-level rows carry internal id 0; a group's children carry the group's index + 1.

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
    beginResetModel();
    regroup();
    endResetModel();
}

int ProblemListModel::totalProblemCount() const
{
    return m_index ? int(m_index->problems.size()) : 0;
}

void ProblemListModel::regroup()
{
    m_shown.clear();
    if (m_index)
        for (const Problem &p : m_index->problems)
            if (m_matcher.matches(QString::fromStdString(p.key)))
                m_shown.push_back(p);
    m_groups = groupProblems(m_shown);
}

const Problem *ProblemListModel::problemAt(int row) const
{
    if (row < 0 || size_t(row) >= m_groups.size() || m_groups[size_t(row)].members.size() != 1)
        return nullptr;
    return &m_shown[m_groups[size_t(row)].members.front()];
}

int ProblemListModel::problemCount() const
{
    return int(m_shown.size());
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
        return int(m_groups.size());
    if (parent.internalId() != 0 || parent.column() != 0)
        return 0;
    const ProblemGroup &g = m_groups[size_t(parent.row())];
    return g.members.size() > 1 ? int(g.members.size()) : 0;
}

int ProblemListModel::columnCount(const QModelIndex &) const
{
    return ColumnCount;
}

const Problem *ProblemListModel::problemOf(const QModelIndex &index) const
{
    if (index.internalId() != 0)
        return &m_shown[m_groups[index.internalId() - 1].members[size_t(index.row())]];
    return problemAt(index.row());
}

QVariant ProblemListModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const Problem *one = problemOf(index);
    if (!one) { // a group of many
        const ProblemGroup &g = m_groups[size_t(index.row())];
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
        return tr("File");
    case OffsetColumn:
        return tr("Offset");
    case EffectColumn:
        return tr("Load");
    case MessageColumn:
        return tr("Problem");
    default:
        return {};
    }
}

} // namespace shardscope::model
