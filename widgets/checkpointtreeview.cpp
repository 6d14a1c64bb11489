// SPDX-License-Identifier: MIT
#include "checkpointtreeview.h"
#include "plaintooltips.h"

#include "model/roles.h"
#include "statusstyle.h"

#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QHeaderView>
#include <QKeyEvent>
#include <QMenu>
#include <QScrollBar>
#include <QStyle>
#include <QTimer>

#include <algorithm>
#include <utility>

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
    } else if (index.column() == LoadColumn) {
        const auto mark = LoadMark(index.data(LoadMarkRole).toInt());
        if (mark != LoadMark::None)
            applyAttention(option, attentionFor(mark));
    } else if (index.column() == StatusColumn && index.data(HasProblemRole).toBool()) {
        option->features |= QStyleOptionViewItem::HasDecoration;
        option->icon = style->standardIcon(QStyle::SP_MessageBoxWarning);
        option->palette.setColor(QPalette::Text, attentionColor(Attention::Bad, option->palette));
    } else if (index.column() == DTypeColumn || index.column() == ShapeColumn) {
        if (NodeKind(index.data(KindRole).toInt()) == NodeKind::Object)
            option->palette.setColor(QPalette::Text,
                                     option->palette.color(QPalette::PlaceholderText));
    }
}

CheckpointTreeView::CheckpointTreeView(QWidget *parent)
    : QTreeView(parent)
{
    installPlainToolTips(this);
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
    if (!model)
        return;
    // What is in sight changes: fit the name column once the view has settled.
    connect(model, &QAbstractItemModel::modelReset, this, &CheckpointTreeView::scheduleFit);
    connect(model, &QAbstractItemModel::layoutChanged, this, &CheckpointTreeView::scheduleFit);
    connect(model, &QAbstractItemModel::rowsInserted, this, &CheckpointTreeView::scheduleFit);
    connect(this, &QTreeView::expanded, this, &CheckpointTreeView::scheduleFit);
    connect(verticalScrollBar(), &QScrollBar::valueChanged, this, &CheckpointTreeView::scheduleFit);
}

void CheckpointTreeView::scheduleFit()
{
    if (std::exchange(m_fitPending, true))
        return;
    QTimer::singleShot(0, this, [this] {
        m_fitPending = false;
        fitNameColumn();
    });
}

void CheckpointTreeView::fitNameColumn()
{
    if (!model() || m_defaultNameWidth == 0)
        return;
    // Only the rows in sight: the width of a leaf 13 levels deep is its indentation, its icon
    // and its name (never every row: that is what ResizeToContents would do).
    const QFontMetrics fm(font());
    QFont boldFont = font();
    boldFont.setBold(true); // the Load column's worst mark is bold
    const QFontMetrics bold(boldFont);
    int widest = 0, shape = 0, load = 0;
    const int bottom = viewport()->height();
    for (QModelIndex i = indexAt(QPoint(0, 0)); i.isValid() && visualRect(i).top() < bottom;
         i = indexBelow(i)) {
        int depth = 0;
        for (QModelIndex p = i.parent(); p.isValid(); p = p.parent())
            ++depth;
        // The decoration's and the item's margins on both sides of icon and text.
        const int w = indentation() * (depth + 1) + iconSize().width() + 28 +
                      fm.horizontalAdvance(i.data(Qt::DisplayRole).toString());
        widest = std::max(widest, w);
        // A filtered group's "30,335 of 650,681 entries" and a Load count are read whole,
        // never elided mid-number.
        shape = std::max(
            shape, fm.horizontalAdvance(i.siblingAtColumn(ShapeColumn).data().toString()) + 16);
        load =
            std::max(load, bold.horizontalAdvance(i.siblingAtColumn(LoadColumn).data().toString()) +
                               iconSize().width() + 20);
    }
    // Wider than the view if need be: the horizontal scroll bar reaches the other columns.
    const int want = std::max(widest, m_defaultNameWidth);
    if (header()->sectionSize(NameColumn) < want)
        header()->resizeSection(NameColumn, want);
    if (header()->sectionSize(ShapeColumn) < shape)
        header()->resizeSection(ShapeColumn, shape);
    if (!isColumnHidden(LoadColumn) && header()->sectionSize(LoadColumn) < load)
        header()->resizeSection(LoadColumn, load);
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
    m_defaultNameWidth = digit * 36;
    h->resizeSection(NameColumn, m_defaultNameWidth);
    h->resizeSection(DTypeColumn, digit * 12);
    h->resizeSection(ShapeColumn, digit * 18);
    // Room for "12,345,678" chunks (DeepSeek-V3: 1.75 M in one checkpoint) and "1023.99 GiB".
    h->resizeSection(ChunksColumn, digit * 13);
    h->resizeSection(SizeColumn, digit * 12);
    h->resizeSection(LoadColumn, digit * 20);
    // What the load does with a key reads next to its name.
    if (h->visualIndex(LoadColumn) != 1)
        h->moveSection(h->visualIndex(LoadColumn), 1);
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
