// SPDX-License-Identifier: MIT
// The stored keys sorted for the diff, kept while their index lives: a rule toggle in the window
// diffs the same index again, and sorting DeepSeek-V3's 650,000 keys was 40% of each diff.
#pragma once

#include "diff/diskkeys.h"

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

namespace shardscope::detail {

/** What the diff's set-up finds in the stored keys, whatever the rules but wrapper_prefix. */
struct SortedKeys
{
    Disk disk;
    std::unordered_map<std::string, uint32_t> extraStateKeys; ///< stored `_extra_state` keys
    bool stackedLayers = false;                               ///< torch_dist keys with a layer axis
    bool mayBeStacked = false; ///< some key has a layer or expert axis
};

/**
 * The sorted keys of `index` for these settings: made by `make` on the first call, then the
 * same until the index is released (its views point into it). `index` null: made every time.
 */
std::shared_ptr<const SortedKeys> sortedKeys(const std::shared_ptr<const CheckpointIndex> &index,
                                             bool stripWrappers, bool literalNames,
                                             const std::function<void(SortedKeys &)> &make);

} // namespace shardscope::detail
