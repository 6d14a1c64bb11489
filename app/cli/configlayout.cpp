// SPDX-License-Identifier: MIT
#include "configlayout.h"

#include <shardscope/escape.h>

#include <CLI/CLI.hpp>

using namespace shardscope;

void addConfigLayoutOptions(CLI::App *c, ConfigLayout &into)
{
    c->add_option("--config", into.config,
                  "A model config (Hugging Face config.json, or Megatron arguments as JSON or a "
                  "checkpoint holding them): the layout is built from it, as `layout "
                  "--from-config` would");
    ParallelConfig &p = into.options.parallel;
    c->add_option("--tp", p.tp, "--config: tensor-parallel size");
    c->add_option("--pp", p.pp, "--config: pipeline-parallel size");
    c->add_option("--ep", p.ep, "--config: expert-parallel size");
    c->add_option("--etp", p.etp, "--config: expert tensor-parallel size");
    c->add_option("--dp", p.dpShard, "--config: FSDP / DP-shard size");
}

void noteParallelGiven(CLI::App *c, ConfigLayout &into)
{
    for (const char *flag : {"--tp", "--pp", "--ep", "--etp", "--dp"})
        into.options.parallelGiven = into.options.parallelGiven || c->count(flag) > 0;
}

Result<std::shared_ptr<const Layout>> buildLayout(const ConfigLayout &c)
{
    auto layout = layoutFromConfig(*c.config, c.options);
    if (!layout)
        return layout.error();
    return std::make_shared<const Layout>(std::move(*layout));
}

std::string configArguments(const ConfigLayout &c)
{
    std::string s = "--config " + shellQuote(c.config.value_or(""));
    if (!c.options.parallelGiven)
        return s;
    const ParallelConfig &p = c.options.parallel;
    s += " --tp " + std::to_string(p.tp) + " --pp " + std::to_string(p.pp) + " --ep " +
         std::to_string(p.ep) + " --etp " + std::to_string(p.etp) + " --dp " +
         std::to_string(p.dpShard);
    return s;
}
