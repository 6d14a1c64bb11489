// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/session.h"

namespace shardscope::detail {

/**
 * The index a request carries (the GUI keeps its checkpoints open), else `path` opened.
 * `everyItem`: for a job that reads every stored item, with each one's structure checked
 * (OpenOptions::checkEveryItem), also where the carried index checked a sample.
 */
Result<OpenedIndex> openOrReuse(const OpenedIndex &opened, const std::string &path,
                                bool everyItem = false);

/** The layout a request carries (the GUI keeps it across rule toggles), else `path` read. */
Result<std::shared_ptr<const Layout>> layoutOrRead(const std::shared_ptr<const Layout> &opened,
                                                   const std::string &path);

/** Fills diff.repair: the fix command for this load and what it would repair and not. */
void previewRepair(const CheckpointIndex &index, const Layout &layout, DiffResult &diff,
                   const std::string &checkpoint, const std::string &layoutPath,
                   const std::string &layoutCommand = {});

/** Whether two stored tensors (their stacked entries) hold the same bytes, read in blocks;
 *  nullopt when either cannot be read. */
std::optional<bool> sameStoredValues(const CheckpointIndex &index, const DiffSource &a,
                                     const DiffSource &b);

/** `options` with DiffOptions::sameValues reading `index` (which must outlive the diff). */
DiffOptions withValueComparison(DiffOptions options, const CheckpointIndex &index);

} // namespace shardscope::detail
