// SPDX-License-Identifier: MIT
#include "snapshots.h"

#include "job.h"
#include "layerstats.h"
#include "tensordetails.h"

namespace shardscope::model {

void registerMetaTypes()
{
    qRegisterMetaType<TensorDetails>();
    qRegisterMetaType<ObjectDetails>();
    qRegisterMetaType<IndexSnapshot>();
    qRegisterMetaType<JobInfo>();
    // Names as signal signatures spell them, for string-based (queued) connections.
    qRegisterMetaType<TensorDetails>("shardscope::model::TensorDetails");
    qRegisterMetaType<ObjectDetails>("shardscope::model::ObjectDetails");
    qRegisterMetaType<IndexSnapshot>("shardscope::model::IndexSnapshot");
    qRegisterMetaType<DiffSnapshot>("shardscope::model::DiffSnapshot");
    qRegisterMetaType<VerifySnapshot>("shardscope::model::VerifySnapshot");
    qRegisterMetaType<CompareSnapshot>("shardscope::model::CompareSnapshot");
    qRegisterMetaType<ValuesSnapshot>("shardscope::model::ValuesSnapshot");
    qRegisterMetaType<LayerStatsSnapshot>("shardscope::model::LayerStatsSnapshot");
    qRegisterMetaType<JobInfo>("shardscope::model::JobInfo");
}

} // namespace shardscope::model
