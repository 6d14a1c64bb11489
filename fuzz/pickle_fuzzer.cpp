// SPDX-License-Identifier: MIT
// The pickle VM (protocols 2-5): decoding, then the value conversion every reader uses.
#include "read/pickle.h"

#include <cstddef>
#include <cstdint>

using namespace shardscope::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (bool compact : {true, false}) {
        PickleLimits limits;
        limits.compactRecords = compact;
        limits.maxMemo = 1u << 20; // the fuzzer's memory, not the product's bound
        auto arena = parsePickle(std::span<const uint8_t>(data, size), 0, limits);
        if (!arena) {
            (void)arena.error().toString();
            continue;
        }
        (void)arena->toPyValue(arena->root()).summary(200);
    }
    return 0;
}
