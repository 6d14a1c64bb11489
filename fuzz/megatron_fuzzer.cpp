// SPDX-License-Identifier: MIT
// A Megatron checkpoint root: latest_checkpointed_iteration.txt, and in the iteration directory
// metadata.json, common.pt and a DCP .metadata. The input holds the four, cut at "@@@@".
#include "fuzzcommon.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace shardscope::fuzz;
    clearScratch();
    const auto parts = split({reinterpret_cast<const char *>(data), size}, "@@@@", 4);
    writeFile("root/latest_checkpointed_iteration.txt", parts[0]);
    for (const char *iter : {"root/iter_0000001/", "root/release/"}) {
        writeFile(std::string(iter) + "metadata.json", parts[1]);
        writeFile(std::string(iter) + "common.pt", parts[2]);
        writeFile(std::string(iter) + ".metadata", parts[3]);
    }
    openAndExercise((scratch() / "root").string());
    openAndExercise((scratch() / "root/iter_0000001").string());
    return 0;
}
