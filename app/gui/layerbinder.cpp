// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/layerplot.h"

namespace shardscope::gui {

using model::CheckpointSession;
using widgets::LayerPlot;

void bindLayerPlot(LayerPlot *plot, CheckpointSession *session, WindowServices &window)
{
    QObject::connect(plot, &LayerPlot::plotRequested, session, &CheckpointSession::runLayerStats);
    QObject::connect(session, &CheckpointSession::layerStatsChanged, plot, &LayerPlot::setStats);
    QObject::connect(plot, &LayerPlot::keyActivated, plot,
                     [&window](const QString &key) { window.selectStoredKey(key); });
}

} // namespace shardscope::gui
