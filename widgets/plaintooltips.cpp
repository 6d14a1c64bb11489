// SPDX-License-Identifier: MIT
#include "plaintooltips.h"

#include <QAbstractItemView>
#include <QHelpEvent>
#include <QToolTip>

namespace shardscope::widgets {

namespace {

class PlainToolTips : public QObject
{
public:
    PlainToolTips(QAbstractItemView *view)
        : QObject(view)
        , m_view(view)
    {}

protected:
    bool eventFilter(QObject *watched, QEvent *event) override
    {
        if (event->type() != QEvent::ToolTip || watched != m_view->viewport())
            return false;
        auto *help = static_cast<QHelpEvent *>(event);
        const QModelIndex index = m_view->indexAt(help->pos());
        const QString text = index.isValid() ? index.data(Qt::ToolTipRole).toString() : QString();
        if (text.isEmpty()) {
            QToolTip::hideText();
            event->ignore();
            return true;
        }
        // Escaped inside an explicit rich-text block: shown exactly as the text is.
        QString html = text.toHtmlEscaped();
        html.replace(QLatin1Char('\n'), QLatin1String("<br>"));
        QToolTip::showText(help->globalPos(),
                           QLatin1String("<p style='white-space:pre-wrap'>") + html +
                               QLatin1String("</p>"),
                           m_view->viewport(), m_view->visualRect(index));
        return true;
    }

private:
    QAbstractItemView *m_view;
};

} // namespace

void installPlainToolTips(QAbstractItemView *view)
{
    view->viewport()->installEventFilter(new PlainToolTips(view));
}

} // namespace shardscope::widgets
