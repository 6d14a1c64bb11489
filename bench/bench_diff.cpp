// SPDX-License-Identifier: MIT
// Times the load diff of a checkpoint against a layout (the metadata is parsed first and timed
// apart: that is bench_open_metadata's figure). Prints one JSON line.
// Usage: bench_diff CHECKPOINT LAYOUT [repeats] [disabled rule]...
#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>
#include <shardscope/layout.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

int main(int argc, char **argv)
{
    if (argc < 3) {
        std::cerr << "usage: bench_diff CHECKPOINT LAYOUT [repeats]\n";
        return 2;
    }
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
    using Clock = std::chrono::steady_clock;
    auto seconds = [](Clock::time_point a) {
        return std::chrono::duration<double>(Clock::now() - a).count();
    };
    shardscope::OpenOptions open;
    open.checkIntegrity = false; // the bench metadata has no .distcp data beside it
    auto t0 = Clock::now();
    auto index = shardscope::openCheckpoint(argv[1], open);
    const double openSeconds = seconds(t0);
    if (!index) {
        std::cerr << index.error().toString() << "\n";
        return 2;
    }
    t0 = Clock::now();
    auto layout = shardscope::readLayout(argv[2]);
    const double layoutSeconds = seconds(t0);
    if (!layout) {
        std::cerr << layout.error().toString() << "\n";
        return 2;
    }
    shardscope::DiffOptions options;
    for (int a = 4; a < argc; ++a)
        options.disabledRules.push_back(argv[a]);
    // Each diff from scratch (the CLI's), then diffs of a shared index after a first one with
    // every rule on (the window's rule toggle: the sorted keys are kept between them).
    double best = 1e300, bestShared = 1e300;
    shardscope::DiffResult last;
    for (int i = 0; i < repeats; ++i) {
        t0 = Clock::now();
        auto d = shardscope::diffAgainstLayout(*index, *layout, options);
        best = std::min(best, seconds(t0));
        if (!d) {
            std::cerr << d.error().toString() << "\n";
            return 2;
        }
        last = std::move(*d);
    }
    auto shared = std::make_shared<const shardscope::CheckpointIndex>(std::move(*index));
    if (!shardscope::diffAgainstLayout(shared, *layout, {}))
        return 2;
    for (int i = 0; i < repeats; ++i) {
        t0 = Clock::now();
        auto d = shardscope::diffAgainstLayout(shared, *layout, options);
        bestShared = std::min(bestShared, seconds(t0));
        if (!d)
            return 2;
    }
    nlohmann::json j = {{"diff_seconds", best},
                        {"diff_shared_index_seconds", bestShared},
                        {"open_seconds", openSeconds},
                        {"layout_read_seconds", layoutSeconds},
                        {"checkpoint_keys", shared->tensors.size() + shared->objects.size()},
                        {"layout_params", layout->params.size()},
                        {"expected_model", last.expectedModel},
                        {"loadable_model", last.loadableModel},
                        {"expected_optimizer", last.expectedOptimizer},
                        {"loadable_optimizer", last.loadableOptimizer},
                        {"unconsumed", last.unconsumed.size()},
                        {"outcome", std::string(shardscope::actionName(last.outcome.action))}};
    std::cout << j.dump() << "\n";
    return 0;
}
