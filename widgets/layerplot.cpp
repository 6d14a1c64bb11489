// SPDX-License-Identifier: MIT
#include "layerplot.h"

#include "model/formatting.h"
#include "model/layerfamily.h"
#include "plotframe.h"
#include "qcustomplotinclude.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace shardscope::widgets {

LayerPlot::LayerPlot(QWidget *parent)
    : QWidget(parent)
    , m_statistic(new QComboBox(this))
    , m_plot(new QPushButton(tr("&Plot Across Layers"), this))
    , m_family(new QLabel(this))
    , m_frame(new PlotFrame(this))
{
    m_statistic->addItems(model::layerStatisticNames());
    m_statistic->setObjectName(QStringLiteral("statistic"));
    connect(m_statistic, &QComboBox::currentIndexChanged, this, &LayerPlot::redraw);
    m_plot->setEnabled(false);
    m_plot->setToolTip(tr("Read the tensor of every layer of this family and plot the statistic"));
    connect(m_plot, &QPushButton::clicked, this, [this] { Q_EMIT plotRequested(m_currentFamily); });
    m_family->setWordWrap(true);
    m_family->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_family->setTextFormat(Qt::PlainText); // may quote the file

    m_frame->addLayerSeries();
    m_frame->setHoverText([this](int, int index, double key, double value) {
        const QString k = m_stats && index >= 0 && index < m_stats->keys.size()
                              ? m_stats->keys[index]
                              : QString();
        return tr("layer %1: %2 = %3\n%4")
            .arg(key)
            .arg(m_statistic->currentText())
            .arg(value, 0, 'g', 6)
            .arg(k);
    });
    connect(m_frame, &PlotFrame::pointClicked, this, [this](int plottable, int index) {
        if (plottable == 0 && m_stats && index >= 0 && index < m_stats->keys.size())
            Q_EMIT keyActivated(m_stats->keys[index]);
    });

    auto *controls = new QHBoxLayout;
    controls->addWidget(m_statistic);
    controls->addWidget(m_plot);
    controls->addStretch(1);
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(controls);
    layout->addWidget(m_family);
    layout->addWidget(m_frame, 1);
    setKey({});
}

QString LayerPlot::caption() const
{
    return m_family->text();
}

model::LayerStatistic LayerPlot::statistic() const
{
    return model::LayerStatistic(m_statistic->currentIndex());
}

void LayerPlot::setKey(const QString &key)
{
    m_key = key;
    m_currentFamily = model::layerKey(key).family;
    m_plot->setEnabled(!m_currentFamily.isEmpty());
    // The plot shows the family the caption names, never the one before.
    if (m_stats && m_stats->family != m_currentFamily)
        m_stats.reset();
    if (m_currentFamily.isEmpty())
        m_family->setText(tr("Select a tensor of a layer (…layers.N…) to plot its family."));
    else if (!m_stats)
        m_family->setText(
            tr("Family: %1 (Plot reads its tensor in every layer)").arg(m_currentFamily));
    redraw();
}

QString LayerPlot::plottedFamily() const
{
    return m_stats ? m_stats->family : QString();
}

void LayerPlot::setStats(const model::LayerStatsSnapshot &stats)
{
    // A family's statistics that arrive after another tensor was selected are not shown.
    if (stats && stats->family != m_currentFamily)
        return;
    m_stats = stats;
    if (stats)
        m_family->setText(tr("%1: %2").arg(
            stats->family, model::countOf(stats->layers.size(), "layer", "layers")));
    redraw();
}

void LayerPlot::redraw()
{
    QCustomPlot *p = m_frame->plot();
    p->graph(0)->data()->clear();
    p->graph(1)->data()->clear();
    p->yAxis->setLabel(m_statistic->currentText());
    if (m_stats) {
        const auto s = statistic();
        const int selected =
            model::layerKey(m_key).family == m_stats->family ? model::layerKey(m_key).layer : -1;
        for (size_t i = 0; i < m_stats->layers.size(); ++i) {
            const double v = model::layerStatistic(m_stats->health[i], s);
            p->graph(0)->addData(m_stats->layers[i], v);
            if (m_stats->layers[i] == selected)
                p->graph(1)->addData(m_stats->layers[i], v);
        }
        p->xAxis->setLabel(tr("layer of %1").arg(m_stats->family));
    } else {
        p->xAxis->setLabel(tr("layer"));
    }
    m_frame->resetZoom();
    p->xAxis->scaleRange(1.1);
    p->yAxis->scaleRange(1.1);
    p->replot();
}

} // namespace shardscope::widgets
