// SPDX-License-Identifier: MIT
#include "tensordetails.h"

namespace shardscope::model {

void registerMetaTypes()
{
    qRegisterMetaType<TensorDetails>();
    qRegisterMetaType<ObjectDetails>();
    qRegisterMetaType<IndexSnapshot>();
    // Names as signal signatures spell them, for string-based (queued) connections.
    qRegisterMetaType<TensorDetails>("shardscope::model::TensorDetails");
    qRegisterMetaType<ObjectDetails>("shardscope::model::ObjectDetails");
    qRegisterMetaType<IndexSnapshot>("shardscope::model::IndexSnapshot");
}

} // namespace shardscope::model
