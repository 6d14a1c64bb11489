// SPDX-License-Identifier: MIT
// Which ranks are gone, after a collective failed: Gloo says "Connection closed by peer" with an
// address, never a rank. Every survivor answers a roll call on the job's store; a rank that does
// not answer within a few seconds is named as lost.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace shardscope::detail {

/**
 * "rank 1 is lost" / "ranks 1, 3 are lost" / "rank 0 (the job's store) is lost", or empty when
 * every rank answered (the failure was something else). `round` tells successive roll calls
 * apart. Waits at most `wait` for the others.
 */
inline std::string lostRanks(c10d::Store &store, int rank, int size, int round,
                             bool storeOnRankZero,
                             std::chrono::milliseconds wait = std::chrono::seconds(5))
{
    const std::string prefix = "rollcall/" + std::to_string(round) + "/";
    std::vector<int> missing;
    try {
        store.set(prefix + std::to_string(rank), std::vector<uint8_t>{1});
        const auto until = std::chrono::steady_clock::now() + wait;
        while (true) {
            missing.clear();
            for (int r = 0; r < size; ++r)
                if (r != rank && !store.check({prefix + std::to_string(r)}))
                    missing.push_back(r);
            if (missing.empty() || std::chrono::steady_clock::now() >= until)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    } catch (const std::exception &) {
        // The store itself is gone: it lived with rank 0 (or the launcher's agent).
        return storeOnRankZero && rank != 0 ? "rank 0 (which serves the job's store) is lost"
                                            : "the job's store (the launcher's agent) is lost";
    }
    if (missing.empty())
        return {};
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i)
        list += (i ? ", " : "") + std::to_string(missing[i]);
    return (missing.size() == 1 ? "rank " : "ranks ") + list +
           (missing.size() == 1 ? " is" : " are") + " lost (killed, or its host failed)";
}

} // namespace shardscope::detail
