// SPDX-License-Identifier: MIT
// Problem messages that a later stage recognises: a reader writes them, the diff reads them.
#pragma once

#include <string_view>

namespace shardscope::detail {

/** The note on a key a shard index lists that its shard does not hold (read/safetensors.cpp);
 *  the diff names that cause for the parameter (diff/matcher.cpp). */
inline constexpr std::string_view kAbsentFromShard =
    "listed in the index but absent from its shard";

/** In the note on a file that is a FIFO, socket or device (common/regularfile.cpp); the diff
 *  then says to put the data file back, not that a save was cut short (diff/evaluate.cpp). */
inline constexpr std::string_view kNotRegularFile = "not a regular file";

} // namespace shardscope::detail
