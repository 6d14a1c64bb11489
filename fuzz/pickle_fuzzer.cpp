// SPDX-License-Identifier: MIT
// The pickle VM (protocols 2-5): decoding, then the value conversion every reader uses. The
// records' fast path is checked against the opcodes: the same value or the same error.
#include "read/pickle.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace shardscope::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    std::string results[2];
    for (int mode = 0; mode < 3; ++mode) {
        PickleLimits limits;
        limits.compactRecords = mode < 2;
        limits.fastRecords = mode == 0;
        limits.maxMemo = 1u << 20; // the fuzzer's memory, not the product's bound
        auto arena = parsePickle(std::span<const uint8_t>(data, size), 0, limits);
        const std::string result = arena ? arena->toPyValue(arena->root()).summary(1 << 16)
                                         : "error: " + arena.error().toString();
        if (mode < 2)
            results[mode] = result;
    }
    if (results[0] != results[1])
        __builtin_trap(); // the fast path decoded something differently
    return 0;
}
