// SPDX-License-Identifier: MIT
#include "flowlayout.h"

#include <QWidget>

namespace shardscope::widgets {

FlowLayout::FlowLayout(QWidget *parent, int hSpacing, int vSpacing)
    : QLayout(parent)
    , m_hSpacing(hSpacing)
    , m_vSpacing(vSpacing)
{
    setContentsMargins(0, 0, 0, 0);
}

FlowLayout::~FlowLayout()
{
    while (QLayoutItem *item = takeAt(0))
        delete item;
}

void FlowLayout::addItem(QLayoutItem *item)
{
    m_items.append(item);
}

int FlowLayout::count() const
{
    return int(m_items.size());
}

QLayoutItem *FlowLayout::itemAt(int index) const
{
    return m_items.value(index);
}

QLayoutItem *FlowLayout::takeAt(int index)
{
    return index >= 0 && index < m_items.size() ? m_items.takeAt(index) : nullptr;
}

Qt::Orientations FlowLayout::expandingDirections() const
{
    return {};
}

bool FlowLayout::hasHeightForWidth() const
{
    return true;
}

int FlowLayout::heightForWidth(int width) const
{
    return doLayout(QRect(0, 0, width, 0), true);
}

QSize FlowLayout::sizeHint() const
{
    // One row when there is room for it.
    int w = 0, h = 0;
    for (const QLayoutItem *item : m_items) {
        if (item->isEmpty())
            continue;
        w += item->sizeHint().width() + (w ? m_hSpacing : 0);
        h = std::max(h, item->sizeHint().height());
    }
    const QMargins m = contentsMargins();
    return {w + m.left() + m.right(), h + m.top() + m.bottom()};
}

QSize FlowLayout::minimumSize() const
{
    // The widest single item: everything else wraps.
    QSize size;
    for (const QLayoutItem *item : m_items)
        if (!item->isEmpty())
            size = size.expandedTo(item->minimumSize());
    const QMargins m = contentsMargins();
    return size + QSize(m.left() + m.right(), m.top() + m.bottom());
}

void FlowLayout::setGeometry(const QRect &rect)
{
    QLayout::setGeometry(rect);
    doLayout(rect, false);
}

int FlowLayout::doLayout(const QRect &rect, bool testOnly) const
{
    const QMargins m = contentsMargins();
    const QRect area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom());
    int x = area.x(), y = area.y(), lineHeight = 0;
    // Items of a line share its height and are centred in it.
    QList<QPair<QLayoutItem *, QRect>> line;
    auto flush = [&] {
        if (!testOnly)
            for (auto &[item, r] : line)
                item->setGeometry(
                    QRect(r.x(), r.y() + (lineHeight - r.height()) / 2, r.width(), r.height()));
        line.clear();
    };
    for (QLayoutItem *item : m_items) {
        if (item->isEmpty())
            continue;
        const QSize hint = item->sizeHint();
        const int w = std::min(hint.width(), area.width());
        if (x > area.x() && x + w > area.right() + 1) {
            flush();
            x = area.x();
            y += lineHeight + m_vSpacing;
            lineHeight = 0;
        }
        line.append({item, QRect(QPoint(x, y), QSize(w, hint.height()))});
        x += w + m_hSpacing;
        lineHeight = std::max(lineHeight, hint.height());
    }
    flush();
    return y + lineHeight - rect.y() + m.bottom();
}

} // namespace shardscope::widgets
