// SPDX-License-Identifier: MIT
#pragma once

#include <QWidget>

namespace shardscope::widgets {

/**
 * One line of text that shrinks with the room it is given: elided (never cut mid-glyph, never
 * hidden), its full text in the tooltip when it does not fit. For status lines that must stay
 * readable at 1280 pixels: its size hint is the whole text, its minimum a few characters.
 */
class ElidedLabel : public QWidget
{
    Q_OBJECT

public:
    explicit ElidedLabel(QWidget *parent = nullptr);

    void setText(const QString &text);
    QString text() const { return m_text; }
    /** The text's colour; invalid: the palette's. */
    void setColor(const QColor &color);
    void setBold(bool bold);
    void setElideMode(Qt::TextElideMode mode);
    /** Whether the text is shown elided. */
    bool isElided() const;
    /** The text as shown. */
    QString shown() const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void paintEvent(QPaintEvent *event) override;
    bool event(QEvent *event) override;

private:
    QString m_text;
    Qt::TextElideMode m_mode = Qt::ElideRight;
};

} // namespace shardscope::widgets
