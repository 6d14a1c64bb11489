// SPDX-License-Identifier: MIT
#include "problemspanel.h"
#include "plaintooltips.h"

#include "model/problemlistmodel.h"
#include "model/roles.h"

#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QTreeView>
#include <QVBoxLayout>

namespace shardscope::widgets {

ProblemsPanel::ProblemsPanel(QWidget *parent)
    : QWidget(parent)
    , m_title(new QLabel(this))
    , m_view(new QTreeView(this))
    , m_proxy(new QSortFilterProxyModel(this))
{
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 0);
    layout->setSpacing(4);
    QFont bold = m_title->font();
    bold.setBold(true);
    m_title->setFont(bold);
    layout->addWidget(m_title);
    layout->addWidget(m_view, 1);

    m_proxy->setSortRole(model::SortRole);
    m_view->setModel(m_proxy);
    installPlainToolTips(m_view);
    m_view->setRootIsDecorated(true); // a group of many keys expands to its keys
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->setSortingEnabled(true);
    m_view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_view->setTextElideMode(Qt::ElideMiddle);
    m_view->sortByColumn(-1, Qt::AscendingOrder); // keep the backend's order until asked
    connect(m_view, &QTreeView::activated, this, [this](const QModelIndex &index) {
        Q_EMIT problemActivated(index.data(model::KeyRole).toString());
    });
    updateTitle();
}

void ProblemsPanel::setModel(model::ProblemListModel *model)
{
    if (m_model)
        disconnect(m_model, nullptr, this, nullptr);
    m_model = model;
    m_proxy->setSourceModel(model);
    if (model) {
        connect(model, &QAbstractItemModel::modelReset, this, &ProblemsPanel::updateTitle);
        const QFontMetrics fm(font());
        const int digit = fm.horizontalAdvance(QLatin1Char('0'));
        QHeaderView *h = m_view->header();
        h->resizeSection(model::ProblemListModel::KeyColumn, digit * 48);
        h->resizeSection(model::ProblemListModel::FileColumn, digit * 26);
        h->resizeSection(model::ProblemListModel::OffsetColumn, digit * 11);
        h->resizeSection(model::ProblemListModel::EffectColumn, digit * 13);
        h->setStretchLastSection(true);
    }
    updateTitle();
}

void ProblemsPanel::updateTitle()
{
    const int n = m_model ? m_model->problemCount() : 0;
    const int total = m_model ? m_model->totalProblemCount() : 0;
    const int groups = m_model ? m_model->rowCount() : 0;
    QString title = n == 0        ? tr("Problems: none found")
                    : n == 1      ? tr("Problems: 1")
                    : groups == n ? tr("Problems: %1").arg(n)
                    : groups == 1 ? tr("Problems: %1, one cause").arg(n)
                                  : tr("Problems: %1 in %2 groups").arg(n).arg(groups);
    if (n != total) // the tree's filter holds: say so, and what it leaves out
        title += tr(" (of %1; the filter hides the rest)").arg(total);
    m_title->setText(title);
}

} // namespace shardscope::widgets
