// SPDX-License-Identifier: MIT
// What a mismatch's evidence says caused it: the fix names the setting that differs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardscope::detail {

/**
 * The fix for a tensor stored as `stored` where the load asks for `want` under `name` (the live
 * or stored name; shapes without stacked axes). `tpDim`/`tp`: when both are TP-local shards (a
 * legacy rank file), the partition dim and the model's TP size, so that a ratio along it names
 * the TP size the checkpoint was saved with.
 */
std::string shapeMismatchFix(const std::string &name, std::span<const int64_t> stored,
                             const std::vector<int64_t> &want, int tpDim = -1, int tp = 1);

} // namespace shardscope::detail
