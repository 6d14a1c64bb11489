// SPDX-License-Identifier: MIT
#pragma once

#include "model/layerstats.h"

#include <QWidget>

class QComboBox;
class QLabel;
class QPushButton;

namespace shardscope::widgets {

class PlotFrame;

/**
 * Any statistic of a parameter family across the model's layers (L2, std, mean, max |x|, …),
 * for spotting the layer that went wrong: the selected tensor names the family, Plot reads
 * every layer's tensor (asked of the caller, who runs it off the GUI thread), the selected
 * layer is marked, and clicking a point selects that layer's tensor.
 */
class LayerPlot : public QWidget
{
    Q_OBJECT

public:
    explicit LayerPlot(QWidget *parent = nullptr);

    /** The selected tensor's key: its family becomes the one to plot (none: Plot disabled). */
    void setKey(const QString &key);
    void setStats(const model::LayerStatsSnapshot &stats);
    PlotFrame *frame() const { return m_frame; }
    /** The family the plot shows; empty when it shows none. */
    QString plottedFamily() const;
    /** The caption above the plot. */
    QString caption() const;
    model::LayerStatistic statistic() const;

Q_SIGNALS:
    void plotRequested(const QString &family);
    void keyActivated(const QString &key);

private:
    void redraw();

    QComboBox *m_statistic;
    QPushButton *m_plot;
    QLabel *m_family;
    PlotFrame *m_frame;
    QString m_key, m_currentFamily;
    model::LayerStatsSnapshot m_stats;
};

} // namespace shardscope::widgets
