// SPDX-License-Identifier: MIT
#include "flattablemodel.h"

namespace shardscope::model {

FlatTableModel::FlatTableModel(QStringList titles, QObject *parent)
    : QAbstractTableModel(parent)
    , m_titles(std::move(titles))
{}

int FlatTableModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : rows();
}

int FlatTableModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : int(m_titles.size());
}

QVariant FlatTableModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    return cellData(index, role);
}

QVariant FlatTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 ||
        section >= m_titles.size())
        return {};
    return m_titles[section];
}

void FlatTableModel::resetContents(const std::function<void()> &change)
{
    beginResetModel();
    change();
    endResetModel();
}

} // namespace shardscope::model
