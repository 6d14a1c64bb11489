// SPDX-License-Identifier: MIT
// model.safetensors.index.json beside one valid shard: the weight map, its file names (which
// must never leave the directory) and the shard they name.
#include "fuzzcommon.h"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace shardscope::fuzz;
    clearScratch();
    // A one-tensor shard: {"w": F32 [1]}.
    const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string shard(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(shard.data(), &n, 8);
    shard += header + std::string(4, '\0');
    writeFile("ckpt/model-00001-of-00001.safetensors", shard);
    openAndExercise(writeFile("ckpt/model.safetensors.index.json",
                              {reinterpret_cast<const char *>(data), size}));
    return 0;
}
