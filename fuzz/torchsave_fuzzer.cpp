// SPDX-License-Identifier: MIT
// A torch.save file: zip (or the legacy format), pickle, storages, objects.
#include "fuzzcommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shardscope::fuzz::clearScratch();
    shardscope::fuzz::openAndExercise(
        shardscope::fuzz::writeFile("model.pt", {reinterpret_cast<const char *>(data), size}));
    return 0;
}
