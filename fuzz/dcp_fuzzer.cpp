// SPDX-License-Identifier: MIT
// A DCP directory's .metadata: the streaming indexer and the index-after-decoding path.
#include "fuzzcommon.h"
#include "read/readers.h"

using namespace shardscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz::clearScratch();
    fuzz::writeFile("ckpt/.metadata", {reinterpret_cast<const char *>(data), size});
    const std::string dir = (fuzz::scratch() / "ckpt").string();
    fuzz::openAndExercise(dir);
    CheckpointIndex index;
    index.inputPath = dir;
    index.dataDir = dir;
    if (detail::readDcp(dir, index, false))
        fuzz::exercise(index);
    return 0;
}
