// SPDX-License-Identifier: MIT
#include "changelistmodel.h"

#include "formatting.h"

namespace shardscope::model {

ChangeListModel::ChangeListModel(QObject *parent)
    : QAbstractTableModel(parent)
{}

void ChangeListModel::setComparison(CompareSnapshot diff)
{
    beginResetModel();
    m_diff = std::move(diff);
    endResetModel();
}

int ChangeListModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() || !m_diff ? 0 : int(m_diff->changes.size());
}

int ChangeListModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ChangeListModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const KeyChange &c = m_diff->changes[size_t(index.row())];
    const bool added = c.kind == KeyChange::Kind::Added;
    switch (role) {
    case ChangeKindRole:
        return QString::fromUtf8(changeName(c.kind));
    case ChangedRole:
        return c.kind != KeyChange::Kind::Renamed;
    case FirstKeyRole:
        return added ? QString() : QString::fromStdString(c.key);
    case Qt::ToolTipRole:
    case Qt::DisplayRole:
        switch (index.column()) {
        case KindColumn:
            return QString::fromUtf8(changeName(c.kind));
        case FirstColumn:
            return added ? QString() : displayText(c.key);
        case SecondColumn:
            if (added)
                return displayText(c.key);
            if (c.kind == KeyChange::Kind::Renamed)
                return displayText(c.otherKey);
            return c.kind == KeyChange::Kind::Removed ? QString() : displayText(c.key);
        case DetailColumn:
            return c.rule.empty()
                       ? displayText(c.detail)
                       : tr("rule %1 %2").arg(displayText(c.rule), displayText(c.detail));
        default:
            return {};
        }
    default:
        return {};
    }
}

QVariant ChangeListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case KindColumn:
        return tr("Change");
    case FirstColumn:
        return tr("This checkpoint");
    case SecondColumn:
        return tr("Compared with");
    case DetailColumn:
        return tr("Detail");
    default:
        return {};
    }
}

} // namespace shardscope::model
