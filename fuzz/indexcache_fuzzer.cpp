// SPDX-License-Identifier: MIT
// A persistent index entry (the user's cache directory is writable by anyone who can write
// there): its header, key and body, with the checksum made to match so that the body's decoder
// is reached, at an aligned address and at an odd one, viewed by the index and copied.
#include "fuzzcommon.h"
#include "read/indexcodec.h"
#include "read/readers.h"

#include <cstring>

using namespace shardscope;

namespace {

// `view`: the index views the bytes (as a mapped entry's does); it ends before they do.
void decode(std::span<const uint8_t> bytes, int threads, bool view)
{
    (void)detail::decodeIndexKey(bytes, "fuzz.ssidx");
    CheckpointIndex index;
    index.dataDir = fuzz::scratch().string();
    if (detail::decodeIndexBody(bytes, "fuzz.ssidx", index, threads, view)) {
        detail::statFiles(index);
        fuzz::exercise(index);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    std::vector<uint8_t> bytes(size + 1);
    std::memcpy(bytes.data() + 1, data, size);
    std::span<uint8_t> odd(bytes.data() + 1, size);
    if (size >= 40) {
        const uint64_t h = detail::indexChecksum(odd);
        std::memcpy(odd.data() + 32, &h, sizeof h);
    }
    decode(odd, 1, true);
    std::vector<uint8_t> aligned(odd.begin(), odd.end());
    decode(aligned, 2, true);
    decode(aligned, 1, false);
    return 0;
}
