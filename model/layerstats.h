// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/health.h>

#include <QMetaType>
#include <QStringList>

#include <memory>
#include <vector>

namespace shardscope::model {

/** The statistics of one family of tensors (layerfamily.h) across the model's layers. */
struct LayerStats
{
    QString family;
    std::vector<int> layers; ///< ascending
    QStringList keys;        ///< per layer
    std::vector<shardscope::TensorHealth> health;
};
using LayerStatsSnapshot = std::shared_ptr<const LayerStats>;

/** The statistics a per-layer plot offers, each read off a TensorHealth. */
enum class LayerStatistic { L2, Std, Mean, MaxAbs, Min, Max, NonFinite };
QStringList layerStatisticNames();
double layerStatistic(const shardscope::TensorHealth &h, LayerStatistic s);

} // namespace shardscope::model

Q_DECLARE_METATYPE(shardscope::model::LayerStatsSnapshot)
