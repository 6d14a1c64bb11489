// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/session.h"

namespace shardscope::detail {

/** The index a request carries (the GUI keeps its checkpoints open), else `path` opened. */
Result<OpenedIndex> openOrReuse(const OpenedIndex &opened, const std::string &path);

/** Fills diff.repair: the fix command for this load and what it would repair and not. */
void previewRepair(const CheckpointIndex &index, const Layout &layout, DiffResult &diff,
                   const std::string &checkpoint, const std::string &layoutPath);

} // namespace shardscope::detail
