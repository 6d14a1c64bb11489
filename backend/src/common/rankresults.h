// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/distributed.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace shardscope::detail {

/**
 * Every rank's results, gathered on every rank in rank order: each sends a JSON object that may
 * carry an "error" (why it stopped). The first rank's error is returned as this rank's, so that
 * every rank ends the same way.
 */
Result<std::vector<nlohmann::json>> gatherRankResults(Communicator &comm,
                                                      const nlohmann::json &mine);

} // namespace shardscope::detail
