// SPDX-License-Identifier: MIT
#pragma once

#include "configlayout.h"

#include <shardscope/layout.h>
#include <shardscope/remote.h>
#include <shardscope/session.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardscope::cli {

struct LayoutCommandOptions
{
    std::string config;
    std::string output; ///< empty: stdout
    LayoutOptions layout;
    bool unfusedMla = false;
};
int runLayout(const LayoutCommandOptions &options);

struct DiffCommandOptions
{
    std::string checkpoint;
    std::optional<std::string> layout;
    ConfigLayout config; ///< --config: the layout built from a model config
    std::optional<std::string> against;
    std::string strictness = "assume_ok_unexpected";
    bool partialLoad = false; ///< --no-strict-fsdp-dtensor-load
    bool everyRule = false;   ///< --every-rule
    std::vector<std::string> disabledRules;
    bool noOptimizer = false;
    bool measureCasts = false;
    bool failOnCast = false;
    bool checkInit = false;
    double initStd = 0.02;
    bool json = false;
    bool all = false; ///< text: every entry on its own line, not problems folded and counts
    // --values: the value comparison (with --against)
    bool values = false;
    double rtol = 0, atol = 0;
    uint64_t maxMemory = 0;
    int threads = 0;
    bool noGpu = false;
    bool allowNotCompared = false; ///< --allow-not-compared
    std::string backend = "auto";
    std::optional<std::string> reportPath; ///< report: -o FILE.md|.html|.json
    std::string commandLine;               ///< for the report's reproduce section
    /** --against with the two sides in different places (one here, or two hosts): where each
     *  side is opened (null: here); the comparison runs here over both indexes. */
    bool acrossHosts = false;
    RemoteSession *checkpointAt = nullptr, *againstAt = nullptr;
};
int runDiff(const DiffCommandOptions &options);
/** diff --against --values (valuescommand.cpp). */
int runValues(const DiffCommandOptions &options);
ValueDiffRequest valueRequest(const DiffCommandOptions &options);

int runRules();

} // namespace shardscope::cli
