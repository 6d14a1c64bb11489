// SPDX-License-Identifier: MIT
// The config readers: a Hugging Face config.json, Megatron arguments as JSON or --flag text.
// The first byte picks the file's name (and so the reader).
#include "fuzzcommon.h"

#include <shardscope/layout.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace shardscope;
    if (size == 0)
        return 0;
    fuzz::clearScratch();
    static const char *names[] = {"config.json", "args.json", "args.txt", "train.sh"};
    const std::string path =
        fuzz::writeFile(names[data[0] % 4], {reinterpret_cast<const char *>(data + 1), size - 1});
    LayoutOptions options;
    auto layout = layoutFromConfig(path, options);
    if (layout)
        (void)layoutToJson(*layout);
    else
        (void)layout.error().toString();
    return 0;
}
