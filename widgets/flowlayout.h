// SPDX-License-Identifier: MIT
#pragma once

#include <QLayout>
#include <QList>

namespace shardscope::widgets {

/**
 * Lays its items out left to right and wraps onto the next line when the row is full (Qt's
 * flow layout example, reduced): a row of controls that fits a laptop's width by wrapping
 * instead of setting the window's minimum width.
 */
class FlowLayout : public QLayout
{
public:
    explicit FlowLayout(QWidget *parent = nullptr, int hSpacing = 6, int vSpacing = 4);
    ~FlowLayout() override;

    void addItem(QLayoutItem *item) override;
    int count() const override;
    QLayoutItem *itemAt(int index) const override;
    QLayoutItem *takeAt(int index) override;
    Qt::Orientations expandingDirections() const override;
    bool hasHeightForWidth() const override;
    int heightForWidth(int width) const override;
    QSize minimumSize() const override;
    QSize sizeHint() const override;
    void setGeometry(const QRect &rect) override;

private:
    int doLayout(const QRect &rect, bool testOnly) const;

    QList<QLayoutItem *> m_items;
    int m_hSpacing, m_vSpacing;
};

} // namespace shardscope::widgets
