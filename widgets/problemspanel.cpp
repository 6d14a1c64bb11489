// SPDX-License-Identifier: MIT
#include "problemspanel.h"

#include "model/formatting.h"
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

// The list follows the tree's filter only while it is in sight: refolding tens of thousands of
// the load's problems on every keystroke would hold up the tree's filter.
void ProblemsPanel::showEvent(QShowEvent *event)
{
    QWidget::showEvent(event);
    if (m_model)
        m_model->setDeferred(false);
}

void ProblemsPanel::hideEvent(QHideEvent *event)
{
    QWidget::hideEvent(event);
    if (m_model)
        m_model->setDeferred(true);
}

void ProblemsPanel::updateTitle()
{
    // The load's problems and the reading's, named apart and counted as the report counts them.
    const int load = m_model ? m_model->loadProblemCount() : 0;
    const int reading = m_model ? m_model->readingProblemCount() : 0;
    const int total = m_model ? m_model->totalProblemCount() : 0;
    const QString readingText =
        reading == 0 ? tr("none reading the checkpoint")
                     : tr("%1 reading the checkpoint").arg(model::formatCount(uint64_t(reading)));
    QString title;
    if (!m_model || !m_model->hasDiff())
        title = tr("Problems: %1 (no layout yet: the load is not known)").arg(readingText);
    else if (m_model->isFolding())
        title = tr("Problems: the load's being counted, %1").arg(readingText);
    else if (load == 0)
        title = tr("Problems: none in the load, %1").arg(readingText);
    else
        title = tr("Problems: %1 in the load, %2")
                    .arg(model::countOf(uint64_t(load), "entry", "entries"), readingText);
    if (load + reading != total) // the tree's filter holds: say so, and what it leaves out
        title += tr(" (of %1; the filter hides the rest)").arg(total);
    m_title->setText(title);
    m_title->setToolTip(title);
}

} // namespace shardscope::widgets
