// SPDX-License-Identifier: MIT
#pragma once

#include <QSharedPointer>
#include <QWidget>

#include <cstdint>
#include <vector>

class QCustomPlot;
class QCPBars;
class QCPAxisTicker;
class QCPItemStraightLine;

namespace shardscope::widgets {

/** A bar histogram of a tensor's finite values (QCustomPlot), with a dashed line at the mean. */
class HistogramPlot : public QWidget
{
    Q_OBJECT

public:
    explicit HistogramPlot(QWidget *parent = nullptr);

    /** Equal bins over [lo, hi]; `mean` is marked when finite. */
    void setHistogram(const std::vector<uint64_t> &bins, double lo, double hi, double mean);
    void clear();
    QCustomPlot *plot() const { return m_plot; }

private:
    QCustomPlot *m_plot = nullptr;
    QCPBars *m_bars = nullptr;
    QCPItemStraightLine *m_meanLine = nullptr;
    QSharedPointer<QCPAxisTicker> m_defaultTicker;
    QSharedPointer<QCPAxisTicker> m_integerTicker;
};

} // namespace shardscope::widgets
