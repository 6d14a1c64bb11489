// SPDX-License-Identifier: MIT
#pragma once

#include <QStyledItemDelegate>
#include <QTreeView>

namespace shardscope::widgets {

/**
 * Icons by node kind in the name column and a warning look for rows with problems. Reads the
 * model's typed roles (KindRole, HasProblemRole), so it works through any proxy.
 */
class CheckpointItemDelegate : public QStyledItemDelegate
{
    Q_OBJECT

public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem *option, const QModelIndex &index) const override;
};

/**
 * The checkpoint tree: uniform row heights (required for trees with 10^5+ rows), sortable
 * header, interactive column widths (never ResizeToContents, which walks every row). The name
 * column widens to the rows in sight, so that a leaf's name stays readable however deep it
 * sits (a horizontal scroll bar takes the rest).
 */
class CheckpointTreeView : public QTreeView
{
    Q_OBJECT

public:
    explicit CheckpointTreeView(QWidget *parent = nullptr);

    void setModel(QAbstractItemModel *model) override;
    /** Sensible default column widths, from the font (the last column stretches). */
    void applyDefaultColumnWidths();
    /** The first tensor in display order (depth first), or an invalid index. */
    QModelIndex firstTensor() const;
    /** Selects `index` (of this view's model), expanding its ancestors and scrolling to it. */
    void selectIndex(const QModelIndex &index);
    /** Widens the name column to the rows in sight (never narrower than its default), and the
     *  Shape and Load columns to their texts there, so that no count is elided. */
    void fitNameColumn();

Q_SIGNALS:
    /** The current item changed; `current` is an index of this view's model (may be invalid). */
    void currentItemChanged(const QModelIndex &current);

protected:
    void currentChanged(const QModelIndex &current, const QModelIndex &previous) override;
    void keyPressEvent(QKeyEvent *event) override;
    void contextMenuEvent(QContextMenuEvent *event) override;

private:
    void copyKey(const QModelIndex &index) const;
    void scheduleFit();
    bool m_fitPending = false;
    int m_defaultNameWidth = 0;
};

} // namespace shardscope::widgets
