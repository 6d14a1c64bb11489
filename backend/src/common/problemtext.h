// SPDX-License-Identifier: MIT
// Problem messages that a later stage recognises: a reader writes them, the diff reads them.
#pragma once

#include <string_view>

namespace shardscope::detail {

/** The note on a key a shard index lists that its shard does not hold (read/safetensors.cpp);
 *  the diff names that cause for the parameter (diff/matcher.cpp). */
inline constexpr std::string_view kAbsentFromShard =
    "listed in the index but absent from its shard";

} // namespace shardscope::detail
