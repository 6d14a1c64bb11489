// SPDX-License-Identifier: MIT
#include "tensordetails.h"

#include "backendrunner.h"
#include "layerstats.h"

#include <utility>

namespace shardscope::model {

void setHistogram(TensorDetails &details)
{
    const TensorHealth &h = details.stats;
    details.histogram.assign(h.histogram.begin(), h.histogram.end());
    details.histogramMin = h.min;
    details.histogramMax = h.max;
    if (!(h.max > h.min) && !details.histogram.empty()) {
        // One value: the kernels count it in the first bin of [v, v]; plot it centred in
        // [v - 0.5, v + 0.5].
        details.histogramMin = h.min - 0.5;
        details.histogramMax = h.max + 0.5;
        const size_t middle = details.histogram.size() / 2;
        std::swap(details.histogram[0], details.histogram[middle]);
    }
}

void registerMetaTypes()
{
    qRegisterMetaType<TensorDetails>();
    qRegisterMetaType<ObjectDetails>();
    qRegisterMetaType<IndexSnapshot>();
    // Names as signal signatures spell them, for string-based (queued) connections.
    qRegisterMetaType<TensorDetails>("shardscope::model::TensorDetails");
    qRegisterMetaType<ObjectDetails>("shardscope::model::ObjectDetails");
    qRegisterMetaType<IndexSnapshot>("shardscope::model::IndexSnapshot");
    qRegisterMetaType<DiffSnapshot>("shardscope::model::DiffSnapshot");
    qRegisterMetaType<VerifySnapshot>("shardscope::model::VerifySnapshot");
    qRegisterMetaType<CompareSnapshot>("shardscope::model::CompareSnapshot");
    qRegisterMetaType<ValuesSnapshot>("shardscope::model::ValuesSnapshot");
    qRegisterMetaType<LayerStatsSnapshot>("shardscope::model::LayerStatsSnapshot");
}

} // namespace shardscope::model
