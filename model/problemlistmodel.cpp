// SPDX-License-Identifier: MIT
#include "problemlistmodel.h"

#include "formatting.h"
#include "roles.h"

#include <shardscope/checkpoint.h>

namespace shardscope::model {

ProblemListModel::ProblemListModel(QObject *parent)
    : QAbstractTableModel(parent)
{}

ProblemListModel::~ProblemListModel() = default;

void ProblemListModel::setIndex(std::shared_ptr<const CheckpointIndex> index)
{
    beginResetModel();
    m_index = std::move(index);
    endResetModel();
}

const Problem *ProblemListModel::problemAt(int row) const
{
    if (!m_index || row < 0 || size_t(row) >= m_index->problems.size())
        return nullptr;
    return &m_index->problems[size_t(row)];
}

int ProblemListModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() || !m_index ? 0 : int(m_index->problems.size());
}

int ProblemListModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ProblemListModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const Problem &p = m_index->problems[size_t(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case KeyColumn:
            return QString::fromStdString(p.key);
        case FileColumn:
            return QString::fromStdString(p.file);
        case OffsetColumn:
            return p.offset ? formatCount(*p.offset) : QString();
        case EffectColumn:
            switch (p.effect) {
            case Problem::Effect::Unreadable:
                return tr("raises");
            case Problem::Effect::Holes:
                return tr("leaves holes");
            case Problem::Effect::Note:
                return QString();
            }
            return {};
        case MessageColumn:
            return QString::fromStdString(p.message);
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
