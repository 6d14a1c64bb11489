// SPDX-License-Identifier: MIT
// One tensor as torch.save writes it (a ZIP archive of data.pkl and one storage record), the item
// DCP's FileSystemWriter stores for every tensor chunk and its reader hands to torch.load.
#pragma once

#include "shardscope/dtype.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardscope::detail {

/** The archive around a tensor's bytes: head, then the contiguous little-endian elements, then
 *  tail. Its length does not depend on the checksum, so offsets are known before the data. */
struct TensorArchive
{
    std::string head, tail;
    uint64_t size(uint64_t dataBytes) const { return head.size() + dataBytes + tail.size(); }
};

/** `crc`: the CRC-32 of the data (0 to size it only). Under 4 GiB of data: no ZIP64 records. */
TensorArchive tensorArchive(DType dtype, const std::vector<int64_t> &shape, uint32_t crc);

/** The ZIP CRC-32 (IEEE 802.3), continued from `crc`. */
uint32_t crc32(std::span<const std::byte> data, uint32_t crc = 0);

} // namespace shardscope::detail
