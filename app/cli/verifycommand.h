// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/remote.h>
#include <shardscope/session.h>

#include <string>

namespace shardscope::cli {

/** The flags of `verify`: the front door's request, and how to run and print it. */
struct VerifyCommandOptions
{
    VerifyRequest request;
    bool json = false;
    bool quiet = false; ///< no progress bar
    /** Under torchrun or srun: the collectives' backend ("auto", "gloo", "nccl"). */
    std::string backend = "auto";
    /** With --ssh: run as a job the server launches (srun, torchrun). */
    RemoteLaunch launch;
};
int runVerify(const VerifyCommandOptions &options);

} // namespace shardscope::cli
