// SPDX-License-Identifier: MIT
#include "changelistmodel.h"

#include "formatting.h"

namespace shardscope::model {

ChangeListModel::ChangeListModel(QObject *parent)
    : FlatTableModel({tr("Change"), tr("This checkpoint"), tr("Compared with"), tr("Detail")},
                     parent)
{}

void ChangeListModel::setComparison(CompareSnapshot diff)
{
    resetContents([&] { m_diff = std::move(diff); });
}

int ChangeListModel::rows() const
{
    return m_diff ? int(m_diff->changes.size()) : 0;
}

QVariant ChangeListModel::cellData(const QModelIndex &index, int role) const
{
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

} // namespace shardscope::model
