// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/diff.h"

namespace shardscope::detail {

/**
 * What the load does: what its planning and Megatron's checks decide (neither looks at chunk
 * coverage: a key with holes is there, loads, and keeps its initial values in them), unless it
 * goes on to read a key whose data cannot be read, which raises.
 */
LoadOutcome loadOutcome(const DiffResult &r, Format format, const DiffOptions &options);

} // namespace shardscope::detail
