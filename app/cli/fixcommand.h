// SPDX-License-Identifier: MIT
#pragma once

#include <string>
#include <vector>

namespace shardscope::cli {

struct FixCommandOptions
{
    std::string checkpoint;
    std::string layout;
    std::string output;
    std::string strictness = "assume_ok_unexpected";
    bool partialLoad = false; ///< --no-strict-fsdp-dtensor-load
    std::vector<std::string> disabledRules;
    bool noOptimizer = false;
    bool copy = false;
    bool force = false;
    bool partial = false;
    bool json = false;
    std::string forTorch;
    std::string commandLine;
};
int runFix(const FixCommandOptions &options);

} // namespace shardscope::cli
