// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope::cli {

struct VerifyCommandOptions
{
    std::string checkpoint;
    std::string layout;
    int world = 0; ///< DP-shard ranks to plan; 0 = the layout's (or the job's processes)
    int tp = 0, pp = 0, ep = 0, etp = 0;             ///< 0 = the layout's
    int firstStageLayers = -1, lastStageLayers = -1; ///< -1 = the layout's
    std::vector<std::string> disabledRules;
    uint64_t maxMemory = 0;
    bool json = false;
    bool hash = false;
    int threads = 0;    // 0: one per core
    bool quiet = false; ///< no progress bar
    /** Under torchrun or srun: the collectives' backend ("auto", "gloo", "nccl"). */
    std::string backend = "auto";
};
int runVerify(const VerifyCommandOptions &options);

} // namespace shardscope::cli
