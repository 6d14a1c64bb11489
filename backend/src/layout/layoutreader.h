// SPDX-License-Identifier: MIT
// The layout JSON read in one streaming pass: the params array (tens of thousands of objects at
// DeepSeek-V3 scale) straight into LayoutParams, the few other fields as a small JSON tree.
#pragma once

#include "shardscope/layout.h"
#include "shardscope/result.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace shardscope::detail {

struct ScannedParam
{
    LayoutParam param;
    bool hasName = false, hasShape = false;
};

struct ScannedLayout
{
    nlohmann::json top = nlohmann::json::object(); ///< every top-level field but params
    bool hasParams = false;                        ///< params was there, as an array
    std::vector<ScannedParam> params;
};

/** Parses the text, checking its numbers (integers only, none beyond 2^40) and the params'
 *  field types as it goes. What needs the whole layout (fusion sizes against tp) is the
 *  caller's. */
Result<ScannedLayout> scanLayoutJson(const std::string &text, const std::string &origin);

} // namespace shardscope::detail
