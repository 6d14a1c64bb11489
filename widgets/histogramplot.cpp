// SPDX-License-Identifier: MIT
#include "histogramplot.h"

#include "qcustomplotinclude.h"

#include <algorithm>
#include <cmath>

namespace shardscope::widgets {

HistogramPlot::HistogramPlot(QWidget *parent)
    : PlotFrame(parent)
    , m_plot(plot())
{
    // Zooming a histogram of 64 bins says nothing more: hover and save only.
    m_plot->setInteractions({});
    m_plot->yAxis->setLabel(tr("count"));
    m_plot->yAxis->setNumberFormat(QStringLiteral("gb"));
    m_plot->yAxis->ticker()->setTickCount(4);
    m_defaultTicker = m_plot->yAxis->ticker();
    auto integers = QSharedPointer<QCPAxisTickerFixed>::create();
    integers->setTickStep(1.0);
    integers->setScaleStrategy(QCPAxisTickerFixed::ssNone);
    m_integerTicker = integers;
    m_plot->xAxis->ticker()->setTickCount(6);

    m_bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    m_bars->setPen(Qt::NoPen);
    m_bars->setBrush(QColor(0x3d, 0x7e, 0xc4));
    m_bars->setWidthType(QCPBars::wtPlotCoords);

    m_meanLine = new QCPItemStraightLine(m_plot);
    m_meanLine->setPen(QPen(QColor(0xd3, 0x54, 0x00), 1.2, Qt::DashLine));
    m_meanLine->setVisible(false);

    setMinimumHeight(140);
    clear();
}

void HistogramPlot::setHistogram(const std::vector<uint64_t> &bins, double lo, double hi,
                                 double mean)
{
    if (bins.empty() || !(hi > lo)) {
        clear();
        return;
    }
    const double width = (hi - lo) / double(bins.size());
    QVector<double> keys, values;
    keys.reserve(qsizetype(bins.size()));
    values.reserve(qsizetype(bins.size()));
    uint64_t top = 0;
    for (size_t i = 0; i < bins.size(); ++i) {
        keys.push_back(lo + (double(i) + 0.5) * width);
        values.push_back(double(bins[i]));
        top = std::max(top, bins[i]);
    }
    m_bars->setWidth(width * 0.92);
    m_bars->setData(keys, values, true);
    m_plot->xAxis->setRange(lo - width * 0.5, hi + width * 0.5);
    // Counts are whole numbers: below a handful, tick every integer instead of at 0.5 steps.
    m_plot->yAxis->setTicker(top < 8 ? m_integerTicker : m_defaultTicker);
    m_plot->yAxis->setRange(0, std::max<double>(1.0, double(top) * 1.08));
    const bool showMean = std::isfinite(mean);
    m_meanLine->setVisible(showMean);
    if (showMean) {
        m_meanLine->point1->setCoords(mean, 0);
        m_meanLine->point2->setCoords(mean, 1);
    }
    m_plot->replot();
}

void HistogramPlot::clear()
{
    m_bars->data()->clear();
    m_meanLine->setVisible(false);
    m_plot->xAxis->setRange(0, 1);
    m_plot->yAxis->setRange(0, 1);
    m_plot->replot();
}

} // namespace shardscope::widgets
