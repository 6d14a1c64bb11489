// SPDX-License-Identifier: MIT
// The zip reader behind torch.save archives (and objects inside .distcp files).
#include "read/ziparchive.h"

using namespace shardscope::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    auto zip = ZipArchive::parse(std::span<const uint8_t>(data, size), 7);
    if (!zip)
        return 0;
    volatile size_t sink = 0;
    for (const ZipArchive::Record &r : zip->records()) {
        auto bytes = zip->data(r.name);
        if (bytes)
            sink = sink + bytes->size();
        sink = sink + (zip->find(r.name) != nullptr);
    }
    (void)sink;
    return 0;
}
