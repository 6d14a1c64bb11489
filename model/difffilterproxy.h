// SPDX-License-Identifier: MIT
#pragma once

#include "keymatcher.h"

#include <QSortFilterProxyModel>

namespace shardscope::model {

/** Filters a DiffListModel by status ("", "problems", or a status name) and by name text. */
class DiffFilterProxy : public QSortFilterProxyModel
{
    Q_OBJECT

public:
    explicit DiffFilterProxy(QObject *parent = nullptr);

    QString statusFilter() const { return m_status; }

public Q_SLOTS:
    void setStatusFilter(const QString &status);
    void setFilterText(const QString &text);

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex &sourceParent) const override;

private:
    QString m_status;
    KeyMatcher m_matcher;
};

} // namespace shardscope::model
