// SPDX-License-Identifier: MIT
// One tensor's value difference as JSON: what ranks send each other, and the entries of
// shardscope.value-diff/1 (report/valuediffjson.cpp writes the rest).
#pragma once

#include "shardscope/valuediff.h"

#include <nlohmann/json.hpp>

namespace shardscope::detail {

/** One tensor's entry of shardscope.value-diff/1 (also what ranks send each other). */
nlohmann::json tensorValueDiffToJson(const TensorValueDiff &t);
TensorValueDiff tensorValueDiffFromJson(const nlohmann::json &j);

} // namespace shardscope::detail
