// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/session.h"

namespace shardscope::detail {

/** The index a request carries (the GUI keeps its checkpoints open), else `path` opened. */
Result<OpenedIndex> openOrReuse(const OpenedIndex &opened, const std::string &path);

} // namespace shardscope::detail
