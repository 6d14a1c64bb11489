// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/result.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail {

/**
 * A torch.save zip archive over a byte range (a whole .pt file, or one item inside a .distcp).
 * torch writes every record stored (uncompressed) with ZIP64 records, so a record is a plain
 * byte range and nothing needs to be inflated. Offsets reported in errors are file offsets.
 */
class ZipArchive
{
public:
    struct Record
    {
        std::string name;    ///< without the archive prefix ("data.pkl", "data/0")
        uint64_t offset = 0; ///< of the data, relative to the archive start
        uint64_t size = 0;
    };

    /** `base` is where `bytes` starts in its file (for error offsets only). */
    static Result<ZipArchive> parse(std::span<const uint8_t> bytes, uint64_t base = 0);

    const std::string &prefix() const { return m_prefix; }
    const std::vector<Record> &records() const { return m_records; }
    const Record *find(std::string_view name) const;
    /** The record's bytes, or an error naming it. */
    Result<std::span<const uint8_t>> data(std::string_view name) const;
    uint64_t base() const { return m_base; }

private:
    std::span<const uint8_t> m_bytes;
    uint64_t m_base = 0;
    std::string m_prefix;
    std::vector<Record> m_records;
};

/** True when the bytes start like a zip archive. */
bool looksLikeZip(std::span<const uint8_t> bytes);

} // namespace shardscope::detail
