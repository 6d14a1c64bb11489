// SPDX-License-Identifier: MIT
// Small shape helpers shared by the readers, the diff, the planner and the reports.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardscope::detail {

/** "[3, 4]" */
inline std::string shapeText(std::span<const int64_t> shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

/** Product of shape[from…] (elements of a shape, or of a row when from = 1). */
inline int64_t product(std::span<const int64_t> shape, size_t from = 0)
{
    int64_t p = 1;
    for (size_t i = from; i < shape.size(); ++i)
        p *= shape[i];
    return p;
}

} // namespace shardscope::detail
