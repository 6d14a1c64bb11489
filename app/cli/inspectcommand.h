// SPDX-License-Identifier: MIT
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardscope::cli {

/** Exit codes shared by every command. */
enum ExitCode { ExitHealthy = 0, ExitProblems = 1, ExitUnreadable = 2 };

struct InspectOptions
{
    std::string path;
    std::vector<std::string> filters; ///< glob patterns on keys; any may match
    std::optional<std::string> tensor;
    bool stats = false;
    bool hash = false;
    bool json = false;
    bool objects = false; ///< decode and show non-tensor entries
    bool collapse = true;
};

int runInspect(const InspectOptions &options);

} // namespace shardscope::cli
