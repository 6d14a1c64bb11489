// SPDX-License-Identifier: MIT
#include "statusstyle.h"

#include <QApplication>
#include <QPalette>
#include <QStyle>
#include <QStyleOptionViewItem>
#include <QWidget>

namespace shardscope::widgets {

using model::LoadMark;

Attention attentionFor(LoadMark mark)
{
    switch (mark) {
    case LoadMark::None:
    case LoadMark::Loaded:
    case LoadMark::Verified:
        return Attention::Fine;
    case LoadMark::Unconsumed:
        return Attention::Warning;
    case LoadMark::Problem:
    case LoadMark::Mismatch:
    case LoadMark::Unreadable:
        return Attention::Bad;
    case LoadMark::KeptAtInit:
        return Attention::Worst;
    }
    return Attention::Fine;
}

QColor attentionColor(Attention level, const QPalette &palette)
{
    const bool dark = palette.color(QPalette::Base).lightness() < 128;
    switch (level) {
    case Attention::Fine:
        return palette.color(QPalette::Text);
    case Attention::Warning:
        return dark ? QColor(0xff, 0xcc, 0x66) : QColor(0x8a, 0x5a, 0x00);
    case Attention::Bad:
        return dark ? QColor(0xff, 0x8a, 0x80) : QColor(0xb0, 0x2a, 0x1a);
    case Attention::Worst:
        return dark ? QColor(0xff, 0x6e, 0xc7) : QColor(0xa0, 0x00, 0x6a);
    }
    return palette.color(QPalette::Text);
}

void applyAttention(QStyleOptionViewItem *option, Attention level, bool markFine)
{
    const QStyle *style = option->widget ? option->widget->style() : QApplication::style();
    QStyle::StandardPixmap icon = QStyle::SP_DialogApplyButton;
    switch (level) {
    case Attention::Fine:
        if (!markFine)
            return;
        break;
    case Attention::Warning:
        icon = QStyle::SP_MessageBoxWarning;
        break;
    case Attention::Bad:
        icon = QStyle::SP_MessageBoxCritical;
        break;
    case Attention::Worst:
        icon = QStyle::SP_MessageBoxCritical;
        option->font.setBold(true);
        break;
    }
    option->features |= QStyleOptionViewItem::HasDecoration;
    option->icon = style->standardIcon(icon);
    option->palette.setColor(QPalette::Text, attentionColor(level, option->palette));
}

} // namespace shardscope::widgets
