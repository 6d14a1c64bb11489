// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/session.h"

namespace shardscope::detail {

/** The index a request carries (the GUI keeps its checkpoints open), else `path` opened. */
Result<OpenedIndex> openOrReuse(const OpenedIndex &opened, const std::string &path);

/** The layout a request carries (the GUI keeps it across rule toggles), else `path` read. */
Result<std::shared_ptr<const Layout>> layoutOrRead(const std::shared_ptr<const Layout> &opened,
                                                   const std::string &path);

/** Fills diff.repair: the fix command for this load and what it would repair and not. */
void previewRepair(const CheckpointIndex &index, const Layout &layout, DiffResult &diff,
                   const std::string &checkpoint, const std::string &layoutPath,
                   const std::string &layoutCommand = {});

} // namespace shardscope::detail
