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
 * Random access to an archive's bytes: a span of them, or (the open's item check) what was read
 * of a stored item's two ends, more read on demand.
 */
class ByteSource
{
public:
    virtual ~ByteSource() = default;
    virtual uint64_t size() const = 0;
    /** [offset, offset + length), inside size(); nullptr when it cannot be had (a read
     *  failed, or more than the source will read). Stays valid as long as the source. */
    virtual const uint8_t *at(uint64_t offset, uint64_t length) = 0;
};

/** A ByteSource over bytes in memory. */
class SpanSource final : public ByteSource
{
public:
    explicit SpanSource(std::span<const uint8_t> bytes)
        : m_bytes(bytes)
    {}
    uint64_t size() const override { return m_bytes.size(); }
    const uint8_t *at(uint64_t offset, uint64_t) override { return m_bytes.data() + offset; }

private:
    std::span<const uint8_t> m_bytes;
};

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
    /** The same over a source that may hold only part of the bytes (data() is not usable). */
    static Result<ZipArchive> parse(ByteSource &bytes, uint64_t base = 0);

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

/** Valid UTF-8, as Python's strict decoder takes it. */
bool isUtf8(std::string_view s);

/** True when the bytes start like a zip archive. */
bool looksLikeZip(std::span<const uint8_t> bytes);

} // namespace shardscope::detail
