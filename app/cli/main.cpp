// SPDX-License-Identifier: MIT
#include "inspectcommand.h"

#include <CLI/CLI.hpp>
#include <shardscope/devices.h>

#include <iostream>

using namespace shardscope::cli;

int main(int argc, char **argv)
{
    CLI::App app{"ShardScope: inspect large-model training checkpoints"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("shardscope-cli 0.1.0"));

    InspectOptions inspect;
    CLI::App *ins = app.add_subcommand(
        "inspect", "Show a checkpoint's keys, dtypes, shapes and chunks (format is detected)");
    ins->add_option("path", inspect.path,
                    "DCP directory, Megatron checkpoint root or iteration directory, .pt/.bin, "
                    ".safetensors or model.safetensors.index.json")
        ->required();
    ins->add_option("--filter", inspect.filters, "Only keys matching this glob (repeatable)");
    ins->add_option("--tensor", inspect.tensor, "Show one tensor (with --stats / --hash)");
    ins->add_flag("--stats", inspect.stats,
                  "Read tensor data: min/max/mean/std, NaN/Inf counts (all selected tensors)");
    ins->add_flag("--hash", inspect.hash, "Read tensor data: SHA-256 of the contiguous bytes");
    ins->add_flag("--json", inspect.json, "Machine-readable output (schema shardscope.inspect/1)");
    ins->add_flag("--objects", inspect.objects, "Decode non-tensor entries (args, RNG state, …)");
    bool noCollapse = false;
    ins->add_flag("--no-collapse", noCollapse, "List every key; do not fold repeated layers");

    CLI::App *dev = app.add_subcommand("devices", "List CUDA devices this build can use");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return e.get_exit_code() == 0 ? app.exit(e) : (app.exit(e), ExitUnreadable);
    }
    if (*dev) {
        std::cout << "CUDA kernels: " << (shardscope::builtWithCuda() ? "built" : "not built")
                  << "\n";
        for (const auto &d : shardscope::cudaDevices())
            std::cout << "cuda:" << d.index << "  " << d.name << "  "
                      << d.memoryBytes / (1024 * 1024) << " MiB  sm_" << d.computeMajor
                      << d.computeMinor << "\n";
        return 0;
    }
    inspect.collapse = !noCollapse;
    return runInspect(inspect);
}
