// SPDX-License-Identifier: MIT
#pragma once

#include "plotframe.h"

#include <QSharedPointer>

#include <cstdint>
#include <vector>

class QCPBars;
class QCPAxisTicker;
class QCPItemStraightLine;

namespace shardscope::widgets {

/** A bar histogram of a tensor's finite values (QCustomPlot), with a dashed line at the mean. */
class HistogramPlot : public PlotFrame
{
    Q_OBJECT

public:
    explicit HistogramPlot(QWidget *parent = nullptr);

    /** Equal bins over [lo, hi]; `mean` is marked when finite. */
    void setHistogram(const std::vector<uint64_t> &bins, double lo, double hi, double mean);
    void clear();

private:
    QCustomPlot *m_plot = nullptr;
    QCPBars *m_bars = nullptr;
    QCPItemStraightLine *m_meanLine = nullptr;
    QSharedPointer<QCPAxisTicker> m_defaultTicker;
    QSharedPointer<QCPAxisTicker> m_integerTicker;
};

} // namespace shardscope::widgets
