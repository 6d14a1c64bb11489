// SPDX-License-Identifier: MIT
#include "statusstyle.h"

#include <QApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QPalette>
#include <QProgressBar>
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

QString showJobProgress(QProgressBar *bar, const QString &stage, int permille, double etaSeconds)
{
    const QString left = etaSeconds < 0 ? QString() : timeLeftText(etaSeconds);
    if (permille < 0) {
        bar->setRange(0, 0);
    } else {
        bar->setRange(0, 1000);
        bar->setValue(permille);
    }
    // The bar says the share done and the time left itself, where it is wide enough to.
    bar->setFormat(left.isEmpty() ? QStringLiteral("%p%") : QStringLiteral("%p% · ") + left);
    if (left.isEmpty())
        return stage;
    return QCoreApplication::translate("Progress", "%1 · %2").arg(stage, left);
}

QString timeLeftText(double seconds)
{
    const int s = qMax(1, qRound(seconds));
    if (s < 90)
        return QCoreApplication::translate("Progress", "about %1 s left").arg(s);
    if (s < 90 * 60)
        return QCoreApplication::translate("Progress", "about %1 min left").arg(qRound(s / 60.0));
    return QCoreApplication::translate("Progress", "about %1 h left")
        .arg(QString::number(s / 3600.0, 'f', 1));
}

QList<QWidget *> attentionLegendItems(QWidget *parent)
{
    QList<QWidget *> out;
    const QStyle *style = parent->style();
    const int size = parent->fontMetrics().height();
    const std::pair<Attention, const char *> items[] = {
        {Attention::Fine, QT_TRANSLATE_NOOP("Legend", "loads as stored")},
        {Attention::Warning,
         QT_TRANSLATE_NOOP("Legend", "loads with a change, or read by nothing")},
        {Attention::Bad, QT_TRANSLATE_NOOP("Legend", "the load raises, or fills it wrongly")},
        {Attention::Worst, QT_TRANSLATE_NOOP("Legend", "silently kept at its initial values")}};
    for (const auto &[level, text] : items) {
        auto *item = new QWidget(parent);
        item->setObjectName(QStringLiteral("legendItem"));
        auto *layout = new QHBoxLayout(item);
        layout->setContentsMargins(0, 0, 0, 0);
        layout->setSpacing(3);
        QStyle::StandardPixmap icon = level == Attention::Fine      ? QStyle::SP_DialogApplyButton
                                      : level == Attention::Warning ? QStyle::SP_MessageBoxWarning
                                                                    : QStyle::SP_MessageBoxCritical;
        auto *pixmap = new QLabel(item);
        pixmap->setPixmap(style->standardIcon(icon).pixmap(size, size));
        auto *label = new QLabel(QCoreApplication::translate("Legend", text), item);
        QPalette pal = label->palette();
        pal.setColor(QPalette::WindowText, attentionColor(level, parent->palette()));
        label->setPalette(pal);
        if (level == Attention::Worst) {
            QFont bold = label->font();
            bold.setBold(true);
            label->setFont(bold);
        }
        layout->addWidget(pixmap);
        layout->addWidget(label);
        out.append(item);
    }
    return out;
}

QWidget *attentionLegend(QWidget *parent)
{
    auto *legend = new QWidget(parent);
    legend->setObjectName(QStringLiteral("legend"));
    auto *layout = new QHBoxLayout(legend);
    layout->setContentsMargins(0, 0, 0, 0);
    for (QWidget *item : attentionLegendItems(legend))
        layout->addWidget(item);
    layout->addStretch(1);
    return legend;
}

} // namespace shardscope::widgets
