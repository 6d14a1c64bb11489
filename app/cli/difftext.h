// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/diff.h>

#include <ostream>

namespace shardscope::cli {

/**
 * A load diff as text: the header and the load's outcome, then the problems and unconsumed keys
 * folded as the report folds them (`decoder.layers.{0..60}.…`), what `fix` would write, the
 * rest as counts per status. `all`: every entry and key on its own line instead.
 */
void printDiffText(std::ostream &out, const DiffResult &diff, bool all);

/**
 * A checkpoint-against-checkpoint diff as text: the counts, which torch reads each, then the
 * changes folded as the report folds them (`removed  decoder.layers.{0..60}.…  (61)`). `all`:
 * every change on its own line instead.
 */
void printCheckpointDiffText(std::ostream &out, const CheckpointDiff &diff, bool all);

} // namespace shardscope::cli
