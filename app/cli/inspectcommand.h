// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/session.h>

namespace shardscope::cli {

/** Exit codes shared by every command. */
enum ExitCode { ExitHealthy = 0, ExitProblems = 1, ExitUnreadable = 2 };

/** The flags of `inspect`: the front door's request, and how to print its result. */
struct InspectOptions
{
    InspectRequest request;
    bool json = false;
    bool collapse = true;
    bool allProblems = false; ///< one line per broken key, not per cause and file
};

int runInspect(const InspectOptions &options);

} // namespace shardscope::cli
