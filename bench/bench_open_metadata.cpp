// SPDX-License-Identifier: MIT
// Times openCheckpoint() on a DCP directory's .metadata (no data files needed) and reports the
// process's peak RSS. Prints one JSON line: {"seconds", "keys_known_seconds" (when every key,
// shape and nesting is read: OpenOptions::onKeysKnown, of the best run), "peak_rss_mb", "keys",
// "chunks"}.
// Usage: bench_open_metadata DIR [repeats]
#include <shardscope/checkpoint.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sys/resource.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::cerr << "usage: bench_open_metadata DIR [repeats]\n";
        return 2;
    }
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
    shardscope::OpenOptions options;
    // The bench file has no .distcp data beside it unless DIR holds sparse stand-ins
    // (bench/gui_bench.sh makes them): SHARDSCOPE_BENCH_INTEGRITY=1 checks them too.
    options.checkIntegrity = std::getenv("SHARDSCOPE_BENCH_INTEGRITY") != nullptr;
    double best = 1e300, keysKnown = -1, keysKnownBest = -1;
    size_t keys = 0, chunks = 0;
    for (int i = 0; i < repeats; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        options.onKeysKnown = [&](const shardscope::CheckpointIndex &) {
            keysKnown =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        };
        auto index = shardscope::openCheckpoint(argv[1], options);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!index) {
            std::cerr << index.error().toString() << "\n";
            return 2;
        }
        if (s < best)
            keysKnownBest = keysKnown;
        best = std::min(best, s);
        keys = index->tensors.size() + index->objects.size();
        chunks = index->chunkCount();
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    nlohmann::json j = {{"seconds", best},
                        {"keys_known_seconds", keysKnownBest},
                        {"peak_rss_mb", double(ru.ru_maxrss) / 1024.0},
                        {"keys", keys},
                        {"chunks", chunks}};
    std::cout << j.dump() << "\n";
    return 0;
}
