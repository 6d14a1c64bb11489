// SPDX-License-Identifier: MIT
#include "verify/verifyrows.h"
#include "kernels/healthcore.h"

#include <algorithm>
#include <cstring>

namespace shardscope::detail {

void fillInitial(std::span<std::byte> bytes, uint64_t seed, uint64_t offset)
{
    // Word w is ((w + 1)·φ) ^ key: an addition a word, which vectorises (this runs over every
    // byte verified).
    constexpr uint64_t kPhi = 0x9E3779B97F4A7C15ull;
    const uint64_t key = kernels::splitmix64(seed) | 1;
    auto word = [key](uint64_t w) { return ((w + 1) * kPhi) ^ key; };
    size_t i = 0;
    for (; i < bytes.size() && (offset + i) % 8; ++i) // to a word boundary
        bytes[i] = std::byte(word((offset + i) / 8) >> (8 * ((offset + i) % 8)));
    const size_t words = (bytes.size() - i) / 8;
    uint64_t x = ((offset + i) / 8 + 1) * kPhi;
    std::byte *out = bytes.data() + i;
    for (size_t k = 0; k < words; ++k, x += kPhi) {
        const uint64_t v = x ^ key;
        std::memcpy(out + k * 8, &v, 8);
    }
    for (i += words * 8; i < bytes.size(); ++i)
        bytes[i] = std::byte(word((offset + i) / 8) >> (8 * ((offset + i) % 8)));
}

size_t rowRunsOf(const ParamShard &shard, int64_t from, int64_t to, int64_t localRowBytes,
                 std::vector<RowRun> &runs)
{
    runs.clear();
    size_t at = 0;
    for (const ShardPiece &pc : shard.pieces) {
        const int64_t lo = std::max(from, pc.paramRow), hi = std::min(to, pc.paramRow + pc.rows);
        if (lo >= hi)
            continue;
        runs.push_back({lo, hi, pc.localRow + (lo - pc.paramRow), at});
        at += size_t((hi - lo) * localRowBytes);
    }
    return at;
}

void moveRows(const ParamShard &shard, const std::vector<RowRun> &runs, int64_t from,
              std::span<std::byte> window, std::span<std::byte> payload, int64_t rowBytes,
              int64_t elementSize, bool toWindow)
{
    const bool cols = shard.colEnd > shard.colBegin;
    const int64_t localRowBytes = cols ? (shard.colEnd - shard.colBegin) * elementSize : rowBytes;
    for (const RowRun &u : runs) {
        std::byte *w = window.data() + (u.paramLo - from) * rowBytes +
                       (cols ? shard.colBegin * elementSize : 0);
        std::byte *q = payload.data() + u.at;
        const int64_t n = u.paramHi - u.paramLo;
        if (!cols) {
            toWindow ? std::memcpy(w, q, size_t(n * rowBytes))
                     : std::memcpy(q, w, size_t(n * rowBytes));
            continue;
        }
        for (int64_t i = 0; i < n; ++i, w += rowBytes, q += localRowBytes)
            toWindow ? std::memcpy(w, q, size_t(localRowBytes))
                     : std::memcpy(q, w, size_t(localRowBytes));
    }
}

} // namespace shardscope::detail
