// SPDX-License-Identifier: MIT
#pragma once

#include <functional>

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
QString describeReload(const CheckpointIndex &before, const CheckpointIndex &after,
                       const std::function<bool(uint64_t done, uint64_t total)> &progress = {});

} // namespace shardscope::model
