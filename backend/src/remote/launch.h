// SPDX-License-Identifier: MIT
// verify as a job of several processes the server launches (srun, or torchrun on one node): the
// ranks run this very binary's `verify --json`, rank 0's progress comes back on its stderr and
// its result on its stdout.
#pragma once

#include "shardscope/remote.h"

#include <string>
#include <vector>

namespace shardscope::detail::remote {

/** What a verify job runs, for tests and the message of a failed launch. */
struct LaunchCommand
{
    std::vector<std::string> argv;
    std::string layoutFile; ///< written for the job (the user's cache), removed after it
};

/**
 * The launcher's command line for `request` (the layout given as a file), or an error when
 * the launcher asked for is not on PATH or cannot do what is asked (torchrun: one node).
 */
Result<LaunchCommand> launchCommand(const VerifyRequest &request, const std::string &layoutPath,
                                    const RemoteLaunch &launch);

/**
 * Runs the job: `layout` (sent along by the client) is written to a file of the user's cache
 * for the ranks to read, and removed when the job ends. A cancel stops the whole job (its
 * process group: SIGTERM, then SIGKILL after five seconds).
 */
Result<VerifyReport> runLaunchedVerify(const VerifyRequest &request, const Layout *layout,
                                       const RemoteLaunch &launch, const JobControl &control);

/** The line rank 0 writes to stderr for each progress step when SHARDSCOPE_PROGRESS_LINES is
 *  set: "shardscope-progress STAGE DONE TOTAL". */
inline constexpr const char *kProgressLine = "shardscope-progress ";

} // namespace shardscope::detail::remote
