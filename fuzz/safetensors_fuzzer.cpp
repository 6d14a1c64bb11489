// SPDX-License-Identifier: MIT
// A .safetensors file: the length prefix and the JSON header.
#include "fuzzcommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shardscope::fuzz::clearScratch();
    shardscope::fuzz::openAndExercise(shardscope::fuzz::writeFile(
        "model.safetensors", {reinterpret_cast<const char *>(data), size}));
    return 0;
}
