// SPDX-License-Identifier: MIT
#include "difffilterproxy.h"

#include "difflistmodel.h"

namespace shardscope::model {

DiffFilterProxy::DiffFilterProxy(QObject *parent)
    : QSortFilterProxyModel(parent)
{}

void DiffFilterProxy::setStatusFilter(const QString &status)
{
    if (status == m_status)
        return;
    m_status = status;
    invalidateFilter();
}

void DiffFilterProxy::setFilterText(const QString &text)
{
    if (m_matcher.setText(text))
        invalidateFilter();
}

bool DiffFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex &sourceParent) const
{
    if (m_status.isEmpty() && m_matcher.isEmpty())
        return true; // no row's text is made (a reset at DeepSeek-V3 scale asks for 120,000)
    const QModelIndex i = sourceModel()->index(sourceRow, DiffListModel::NameColumn, sourceParent);
    if (m_status == QStringLiteral("problems")) {
        if (!i.data(DiffListModel::ProblemRole).toBool())
            return false;
    } else if (!m_status.isEmpty() &&
               i.data(DiffListModel::DiffStatusRole).toString() != m_status) {
        return false;
    }
    return m_matcher.isEmpty() || m_matcher.matches(i.data(Qt::DisplayRole).toString());
}

} // namespace shardscope::model
