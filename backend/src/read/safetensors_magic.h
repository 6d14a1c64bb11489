// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace shardscope::detail {

/** u64 little-endian header length, then '{'. */
inline bool looksLikeSafetensors(std::span<const uint8_t> b)
{
    if (b.size() < 9)
        return false;
    uint64_t n;
    std::memcpy(&n, b.data(), 8);
    return n >= 2 && n <= b.size() - 8 && b[8] == '{';
}

} // namespace shardscope::detail
