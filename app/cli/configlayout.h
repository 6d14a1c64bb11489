// SPDX-License-Identifier: MIT
// --config for diff, report and fix: the layout built from a model config, as the window builds
// it, so that one command answers "will it load?".
#pragma once

#include <shardscope/layout.h>
#include <shardscope/result.h>

#include <memory>
#include <optional>
#include <string>

namespace CLI {
class App;
}

struct ConfigLayout
{
    std::optional<std::string> config;
    shardscope::LayoutOptions options;
};

/** Adds --config and the parallel sizes (--tp, --pp, --ep, --etp, --dp) to `command`. */
void addConfigLayoutOptions(CLI::App *command, ConfigLayout &into);

/** After parsing: whether any parallel size was given (else the config's own are used). */
void noteParallelGiven(CLI::App *command, ConfigLayout &into);

/** The layout the config describes. */
shardscope::Result<std::shared_ptr<const shardscope::Layout>> buildLayout(const ConfigLayout &c);

/** How a command line names it: "--config C --tp 2 …". */
std::string configArguments(const ConfigLayout &c);
