// SPDX-License-Identifier: MIT
#pragma once

#include <QWidget>

#include <functional>

class QCustomPlot;

namespace shardscope::widgets {

/**
 * A QCustomPlot styled from the palette (light or dark), with what every plot here offers: the
 * wheel zooms and a drag pans (double-click resets), hovering shows the nearest point's values,
 * and the context menu saves the plot as PNG or PDF.
 */
class PlotFrame : public QWidget
{
    Q_OBJECT

public:
    explicit PlotFrame(QWidget *parent = nullptr);

    QCustomPlot *plot() const { return m_plot; }
    /**
     * What hovering over a data point of plottable `p` shows; `index` is the point's position
     * in its data. Unset: "x, y".
     */
    using HoverText = std::function<QString(int p, int index, double key, double value)>;
    void setHoverText(HoverText text) { m_hoverText = std::move(text); }
    /** What hovering shows where no data point is near: the plot coordinates under the mouse
     *  (empty: nothing). For plots of items rather than data. */
    using HoverAt = std::function<QString(double key, double value)>;
    void setHoverAt(HoverAt text) { m_hoverAt = std::move(text); }
    /** Two graphs for a value per layer: graph 0 every layer (line and points), graph 1 the
     *  selected layer's point, marked. The x axis is labelled "layer". */
    void addLayerSeries();
    /** Rescales the axes to the data (what a double-click does). */
    void resetZoom();
    /** Writes the plot as PNG or PDF (by the extension); false when it cannot. */
    bool save(const QString &path);

Q_SIGNALS:
    /** A data point was clicked: plottable `p`, the point's index in its data. */
    void pointClicked(int p, int index);

protected:
    bool eventFilter(QObject *watched, QEvent *event) override;

private:
    void showHover(const QPoint &pos);
    void contextMenu(const QPoint &pos);
    /** The data point nearest `pos` within a few pixels: (plottable, index) or (-1, -1). */
    std::pair<int, int> pointAt(const QPoint &pos, double *key, double *value) const;

    QCustomPlot *m_plot;
    HoverText m_hoverText;
    HoverAt m_hoverAt;
};

} // namespace shardscope::widgets
