// SPDX-License-Identifier: MIT
// The layout JSON: whatever parses must write back out and parse again to the same layout.
#include <shardscope/layout.h>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    auto layout = shardscope::layoutFromJson({reinterpret_cast<const char *>(data), size}, "fuzz");
    if (!layout)
        return 0;
    const std::string text = shardscope::layoutToJson(*layout);
    auto again = shardscope::layoutFromJson(text, "fuzz");
    if (!again || shardscope::layoutToJson(*again) != text)
        std::abort(); // a layout we write that we cannot read back
    return 0;
}
