// SPDX-License-Identifier: MIT
// One tensor as torch.save writes it (a ZIP archive of data.pkl and one storage record), the item
// DCP's FileSystemWriter stores for every tensor chunk and its reader hands to torch.load.
#pragma once

#include "shardscope/dtype.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail {

/** A pickle of the opcodes torch.save writes (protocol 2), every one of which torch.load's
 *  weights-only unpickler accepts. */
class TorchPickle
{
public:
    TorchPickle();
    void op(char c) { m_out.push_back(c); }
    void global(std::string_view module, std::string_view name);
    void str(std::string_view s);
    void integer(int64_t v);
    void ints(std::span<const int64_t> v); ///< a tuple
    /** A contiguous tensor of the storage record `data/<key>` (_rebuild_tensor_v2, or _v3 for
     *  the dtypes torch.save writes as an untyped storage). */
    void tensor(DType dtype, std::span<const int64_t> shape, std::string_view key);
    /** BINGET / LONG_BINGET of a memo slot. */
    void get(uint64_t slot);
    /** Raw opcodes, as another pickle holds them. */
    void append(std::string_view opcodes) { m_out.append(opcodes); }
    /** STOP appended: the pickle. */
    std::string finish();
    /** The opcodes after PROTO, without STOP: to go into another pickle. */
    std::string body() const { return m_out.substr(2); }

private:
    void le(uint64_t v, int bytes);
    std::string m_out;
};

/** A stored (uncompressed) ZIP entry. */
struct ZipRecord
{
    std::string name;
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t offset = 0; ///< of its local header
};

/** The local header of `r` written at `at`, padded so that its data starts 64-byte aligned (as
 *  torch aligns its records). Under 4 GiB: no ZIP64 records. */
std::string zipLocalHeader(const ZipRecord &r, uint64_t at);
/** The central directory of `records` and its end record, written at `at`. */
std::string zipDirectory(const std::vector<ZipRecord> &records, uint64_t at);

/** The archive around a tensor's bytes: head, then the contiguous little-endian elements, then
 *  tail. Its length does not depend on the checksum, so offsets are known before the data. */
struct TensorArchive
{
    std::string head, tail;
    uint64_t size(uint64_t dataBytes) const { return head.size() + dataBytes + tail.size(); }
};

/** `crc`: the CRC-32 of the data (0 to size it only). Under 4 GiB of data: no ZIP64 records. */
TensorArchive tensorArchive(DType dtype, std::span<const int64_t> shape, uint32_t crc);

/** A list of strings as torch.save writes it (the archive without storages): what DCP stores
 *  for a bytes item such as an optimizer group's `params` names. */
std::string stringListArchive(const std::vector<std::string> &items);

/** The ZIP CRC-32 (IEEE 802.3), continued from `crc`. */
uint32_t crc32(std::span<const std::byte> data, uint32_t crc = 0);

} // namespace shardscope::detail
