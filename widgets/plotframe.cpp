// SPDX-License-Identifier: MIT
#include "plotframe.h"

#include "qcustomplotinclude.h"

#include <QFileDialog>
#include <QMenu>
#include <QMouseEvent>
#include <QToolTip>
#include <QVBoxLayout>

#include <cmath>
#include <limits>

namespace shardscope::widgets {

PlotFrame::PlotFrame(QWidget *parent)
    : QWidget(parent)
    , m_plot(new QCustomPlot(this))
{
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);

    const QPalette pal = palette();
    m_plot->setBackground(pal.brush(QPalette::Base));
    m_plot->axisRect()->setAutoMargins(QCP::msLeft | QCP::msBottom);
    m_plot->axisRect()->setMargins(QMargins(0, 6, 10, 0));
    QFont tickFont = font();
    tickFont.setPointSizeF(tickFont.pointSizeF() * 0.85);
    for (QCPAxis *axis : {m_plot->xAxis, m_plot->yAxis}) {
        axis->setTickLabelFont(tickFont);
        axis->setLabelFont(tickFont);
        axis->setBasePen(QPen(pal.color(QPalette::Mid)));
        axis->setTickPen(QPen(pal.color(QPalette::Mid)));
        axis->setSubTickPen(QPen(pal.color(QPalette::Mid)));
        axis->setTickLabelColor(pal.color(QPalette::Text));
        axis->setLabelColor(pal.color(QPalette::Text));
        axis->grid()->setPen(QPen(pal.color(QPalette::Midlight), 0, Qt::DotLine));
    }
    m_plot->legend->setFont(tickFont);
    m_plot->legend->setBrush(pal.brush(QPalette::Base));
    m_plot->legend->setTextColor(pal.color(QPalette::Text));
    m_plot->legend->setBorderPen(QPen(pal.color(QPalette::Mid)));
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->setMouseTracking(true);
    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    m_plot->installEventFilter(this);
    connect(m_plot, &QCustomPlot::customContextMenuRequested, this, &PlotFrame::contextMenu);
    connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] { resetZoom(); });
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent *event) {
        if (event->button() != Qt::LeftButton)
            return;
        double key = 0, value = 0;
        const auto [p, index] = pointAt(event->pos(), &key, &value);
        if (p >= 0)
            Q_EMIT pointClicked(p, index);
    });
}

bool PlotFrame::eventFilter(QObject *watched, QEvent *event)
{
    if (watched == m_plot && event->type() == QEvent::MouseMove)
        showHover(static_cast<QMouseEvent *>(event)->pos());
    return QWidget::eventFilter(watched, event);
}

std::pair<int, int> PlotFrame::pointAt(const QPoint &pos, double *key, double *value) const
{
    double best = 8.0 * 8.0; // pixels², squared
    std::pair<int, int> found{-1, -1};
    for (int p = 0; p < m_plot->plottableCount(); ++p) {
        QCPAbstractPlottable *plottable = m_plot->plottable(p);
        auto *data = plottable->interface1D();
        if (!data || !plottable->visible())
            continue;
        for (int i = 0; i < data->dataCount(); ++i) {
            const double k = data->dataMainKey(i), v = data->dataMainValue(i);
            if (!std::isfinite(k) || !std::isfinite(v))
                continue;
            const QPointF at = plottable->coordsToPixels(k, v);
            double dx = at.x() - pos.x(), dy = at.y() - pos.y();
            // A bar is hit anywhere over its column.
            if (auto *bars = qobject_cast<QCPBars *>(plottable)) {
                const double half =
                    std::abs(plottable->keyAxis()->coordToPixel(k + bars->width() / 2) -
                             plottable->keyAxis()->coordToPixel(k));
                dx = std::abs(dx) <= half ? 0 : dx;
                dy = 0;
            }
            const double d = dx * dx + dy * dy;
            if (d <= best) {
                best = d;
                found = {p, i};
                *key = k;
                *value = v;
            }
        }
    }
    return found;
}

void PlotFrame::showHover(const QPoint &pos)
{
    double key = 0, value = 0;
    const auto [p, index] = pointAt(pos, &key, &value);
    if (p < 0) {
        const QString text = m_hoverAt ? m_hoverAt(m_plot->xAxis->pixelToCoord(pos.x()),
                                                   m_plot->yAxis->pixelToCoord(pos.y()))
                                       : QString();
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(m_plot->mapToGlobal(pos), text, m_plot);
        return;
    }
    const QString text = m_hoverText
                             ? m_hoverText(p, index, key, value)
                             : QStringLiteral("%1, %2").arg(key, 0, 'g', 6).arg(value, 0, 'g', 6);
    QToolTip::showText(m_plot->mapToGlobal(pos), text, m_plot);
}

void PlotFrame::addLayerSeries()
{
    QCPGraph *all = m_plot->addGraph();
    all->setPen(QPen(QColor(0x3d, 0x7e, 0xc4), 1.5));
    all->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    QCPGraph *selected = m_plot->addGraph();
    selected->setLineStyle(QCPGraph::lsNone);
    const QColor mark(0xd3, 0x54, 0x00);
    selected->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(mark, 2), mark, 8));
    m_plot->xAxis->setLabel(tr("layer"));
    // Layers are whole numbers: ticks at 0, 1, 2 (or every 2nd, 5th, 10th…), never at 0.5.
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1.0);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    m_plot->xAxis->setTicker(ticker);
    m_plot->yAxis->setNumberFormat(QStringLiteral("gb"));
}

void PlotFrame::resetZoom()
{
    m_plot->rescaleAxes();
    m_plot->replot();
}

bool PlotFrame::save(const QString &path)
{
    if (path.endsWith(QStringLiteral(".pdf"), Qt::CaseInsensitive))
        return m_plot->savePdf(path);
    return m_plot->savePng(path, 0, 0, 2.0);
}

void PlotFrame::contextMenu(const QPoint &pos)
{
    QMenu menu(this);
    QAction *png = menu.addAction(tr("Save as &PNG…"));
    QAction *pdf = menu.addAction(tr("Save as P&DF…"));
    menu.addSeparator();
    QAction *reset = menu.addAction(tr("&Reset Zoom"));
    QAction *chosen = menu.exec(m_plot->mapToGlobal(pos));
    if (chosen == reset) {
        resetZoom();
    } else if (chosen == png || chosen == pdf) {
        const bool isPdf = chosen == pdf;
        const QString path = QFileDialog::getSaveFileName(
            this, isPdf ? tr("Save Plot as PDF") : tr("Save Plot as PNG"), QString(),
            isPdf ? tr("PDF (*.pdf)") : tr("PNG (*.png)"));
        if (!path.isEmpty())
            save(path);
    }
}

} // namespace shardscope::widgets
