// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/diff.h>

#include <ostream>

namespace shardscope::cli {

/**
 * Filled the wrong way, or not at all: what the load does not fill, fills from the wrong key,
 * fills with another shape or with holes, cannot read, or casts with a possible loss. What a
 * rule maps the way the load asks (ok, split, merge, rename, a cast that keeps every value) is
 * counted, not listed.
 */
bool isTextProblem(const DiffEntry &e);

/**
 * A load diff as text: the header and the load's outcome, then the problems and unconsumed keys
 * folded as the report folds them (`decoder.layers.{0..60}.…`), what `fix` would write, the
 * rest as counts per status. `all`: every entry and key on its own line instead.
 */
void printDiffText(std::ostream &out, const DiffResult &diff, bool all);

} // namespace shardscope::cli
