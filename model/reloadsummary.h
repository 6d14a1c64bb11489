// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

namespace shardscope {
struct CheckpointIndex;
}

namespace shardscope::model {

/**
 * What a reload found changed on disk, in one line: keys added, removed, reshaped or retyped
 * (the backend's checkpoint comparison, no rules), data files that appeared, went or changed
 * size, and the saved facts that differ (iteration, DCP save id). "nothing changed" otherwise.
 * Runs on the runner's thread: a DeepSeek-V3-scale index takes a second.
 */
QString describeReload(const CheckpointIndex &before, const CheckpointIndex &after);

} // namespace shardscope::model
