// SPDX-License-Identifier: MIT
#include "checkpointtreeview.h"

#include "model/roles.h"

#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QHeaderView>
#include <QKeyEvent>
#include <QMenu>
#include <QStyle>

using namespace shardscope::model;

namespace shardscope::widgets {

void CheckpointItemDelegate::initStyleOption(QStyleOptionViewItem *option,
                                             const QModelIndex &index) const
{
    QStyledItemDelegate::initStyleOption(option, index);
    const QStyle *style = option->widget ? option->widget->style() : QApplication::style();
    if (index.column() == NameColumn) {
        option->features |= QStyleOptionViewItem::HasDecoration;
        switch (NodeKind(index.data(KindRole).toInt())) {
        case NodeKind::Group:
            option->icon = style->standardIcon(QStyle::SP_DirIcon);
            break;
        case NodeKind::Tensor:
            option->icon = style->standardIcon(QStyle::SP_FileIcon);
            break;
        case NodeKind::Object:
            option->icon = style->standardIcon(QStyle::SP_FileDialogInfoView);
            break;
        }
    } else if (index.column() == StatusColumn && index.data(HasProblemRole).toBool()) {
        option->features |= QStyleOptionViewItem::HasDecoration;
        option->icon = style->standardIcon(QStyle::SP_MessageBoxWarning);
        option->palette.setColor(QPalette::Text, QColor(0xb0, 0x2a, 0x1a));
    } else if (index.column() == DTypeColumn || index.column() == ShapeColumn) {
        if (NodeKind(index.data(KindRole).toInt()) == NodeKind::Object)
            option->palette.setColor(QPalette::Text,
                                     option->palette.color(QPalette::PlaceholderText));
    }
}

CheckpointTreeView::CheckpointTreeView(QWidget *parent)
    : QTreeView(parent)
{
    setUniformRowHeights(true);
    setAlternatingRowColors(true);
    setSortingEnabled(true);
    setSelectionMode(QAbstractItemView::SingleSelection);
    setSelectionBehavior(QAbstractItemView::SelectRows);
    setAllColumnsShowFocus(true);
    setEditTriggers(QAbstractItemView::NoEditTriggers);
    setItemDelegate(new CheckpointItemDelegate(this));
    setIconSize(QSize(16, 16));
    setTextElideMode(Qt::ElideMiddle);
    header()->setSectionsMovable(false);
    header()->setStretchLastSection(true);
    header()->setSortIndicatorShown(true);
    sortByColumn(NameColumn, Qt::AscendingOrder);
}

void CheckpointTreeView::setModel(QAbstractItemModel *model)
{
    QTreeView::setModel(model);
    applyDefaultColumnWidths();
    sortByColumn(NameColumn, Qt::AscendingOrder);
}

void CheckpointTreeView::applyDefaultColumnWidths()
{
    QHeaderView *h = header();
    if (h->count() < ColumnCount)
        return;
    const QFontMetrics fm(font());
    const int digit = fm.horizontalAdvance(QLatin1Char('0'));
    for (int c = 0; c < ColumnCount; ++c)
        h->setSectionResizeMode(c, QHeaderView::Interactive);
    h->resizeSection(NameColumn, digit * 36);
    h->resizeSection(DTypeColumn, digit * 12);
    h->resizeSection(ShapeColumn, digit * 14);
    h->resizeSection(ChunksColumn, digit * 8);
    h->resizeSection(SizeColumn, digit * 10);
}

QModelIndex CheckpointTreeView::firstTensor() const
{
    const QAbstractItemModel *m = model();
    if (!m)
        return {};
    // Depth first, in display order; stops at the first tensor, so only its path is visited.
    std::vector<QModelIndex> stack;
    for (int r = m->rowCount() - 1; r >= 0; --r)
        stack.push_back(m->index(r, 0));
    while (!stack.empty()) {
        const QModelIndex i = stack.back();
        stack.pop_back();
        const NodeKind kind = NodeKind(i.data(KindRole).toInt());
        if (kind == NodeKind::Tensor)
            return i;
        if (kind == NodeKind::Group)
            for (int r = m->rowCount(i) - 1; r >= 0; --r)
                stack.push_back(m->index(r, 0, i));
    }
    return {};
}

void CheckpointTreeView::selectIndex(const QModelIndex &index)
{
    if (!index.isValid())
        return;
    for (QModelIndex p = index.parent(); p.isValid(); p = p.parent())
        expand(p);
    setCurrentIndex(index);
    scrollTo(index, QAbstractItemView::PositionAtCenter);
}

void CheckpointTreeView::currentChanged(const QModelIndex &current, const QModelIndex &previous)
{
    QTreeView::currentChanged(current, previous);
    if (current.row() != previous.row() || current.parent() != previous.parent() ||
        current.model() != previous.model())
        Q_EMIT currentItemChanged(current.siblingAtColumn(NameColumn));
}

void CheckpointTreeView::copyKey(const QModelIndex &index) const
{
    if (index.isValid())
        QGuiApplication::clipboard()->setText(index.data(KeyRole).toString());
}

void CheckpointTreeView::keyPressEvent(QKeyEvent *event)
{
    if (event->matches(QKeySequence::Copy)) {
        copyKey(currentIndex());
        event->accept();
        return;
    }
    QTreeView::keyPressEvent(event);
}

void CheckpointTreeView::contextMenuEvent(QContextMenuEvent *event)
{
    const QModelIndex index = indexAt(event->pos());
    if (!index.isValid())
        return;
    QMenu menu(this);
    menu.addAction(tr("Copy Key"), this, [this, index] { copyKey(index); });
    if (model()->hasChildren(index.siblingAtColumn(0))) {
        menu.addSeparator();
        menu.addAction(tr("Expand Subtree"), this,
                       [this, index] { expandRecursively(index.siblingAtColumn(0)); });
        menu.addAction(tr("Collapse"), this, [this, index] { collapse(index.siblingAtColumn(0)); });
    }
    menu.exec(event->globalPos());
}

} // namespace shardscope::widgets
