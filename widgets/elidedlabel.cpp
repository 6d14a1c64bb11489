// SPDX-License-Identifier: MIT
#include "elidedlabel.h"

#include <QEvent>
#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

namespace shardscope::widgets {

namespace {

constexpr int kMargin = 4; ///< on each side

} // namespace

ElidedLabel::ElidedLabel(QWidget *parent)
    : QWidget(parent)
{
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
}

void ElidedLabel::setText(const QString &text)
{
    if (text == m_text)
        return;
    m_text = text;
    updateGeometry();
    update();
}

void ElidedLabel::setColor(const QColor &color)
{
    QPalette p = palette();
    p.setColor(QPalette::WindowText, color.isValid() ? color
                                     : parentWidget()
                                         ? parentWidget()->palette().color(QPalette::WindowText)
                                         : QPalette().color(QPalette::WindowText));
    setPalette(p);
}

void ElidedLabel::setBold(bool bold)
{
    QFont f = font();
    f.setBold(bold);
    setFont(f);
    updateGeometry();
}

void ElidedLabel::setElideMode(Qt::TextElideMode mode)
{
    m_mode = mode;
    update();
}

bool ElidedLabel::isElided() const
{
    return shown() != m_text;
}

QString ElidedLabel::shown() const
{
    return fontMetrics().elidedText(m_text, m_mode, width() - 2 * kMargin);
}

QSize ElidedLabel::sizeHint() const
{
    // The advance is rounded; elidedText() measures the glyphs exactly: a pixel to spare.
    const QFontMetrics fm = fontMetrics();
    return {m_text.isEmpty() ? 0 : fm.horizontalAdvance(m_text) + 2 * kMargin + 2, fm.height() + 2};
}

QSize ElidedLabel::minimumSizeHint() const
{
    const QFontMetrics fm = fontMetrics();
    const int few = fm.horizontalAdvance(QStringLiteral("Mmmmm…"));
    return {m_text.isEmpty() ? 0 : std::min(few, sizeHint().width()), fm.height() + 2};
}

void ElidedLabel::paintEvent(QPaintEvent *)
{
    QPainter p(this);
    p.setPen(palette().color(QPalette::WindowText));
    const QRect r = rect().adjusted(kMargin, 0, -kMargin, 0);
    p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft | Qt::TextSingleLine, shown());
}

bool ElidedLabel::event(QEvent *event)
{
    // The whole text when it does not fit, else the tooltip set on the widget.
    if (event->type() == QEvent::ToolTip && isElided() && toolTip().isEmpty()) {
        QToolTip::showText(static_cast<QHelpEvent *>(event)->globalPos(), m_text, this);
        return true;
    }
    return QWidget::event(event);
}

} // namespace shardscope::widgets
