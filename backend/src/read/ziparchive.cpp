// SPDX-License-Identifier: MIT
#include "read/ziparchive.h"

#include <algorithm>
#include <cstring>

namespace shardscope::detail {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;

template<typename T>
T le(const uint8_t *p)
{
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

} // namespace

bool looksLikeZip(std::span<const uint8_t> b)
{
    return b.size() >= 4 && le<uint32_t>(b.data()) == kLocalSig;
}

Result<ZipArchive> ZipArchive::parse(std::span<const uint8_t> b, uint64_t base)
{
    auto fail = [&](std::string msg, uint64_t at) {
        return makeError(Error::Code::Format, "zip: " + std::move(msg)).atOffset(base + at);
    };
    const uint64_t n = b.size();
    if (n < 22)
        return fail("archive of " + std::to_string(n) + " bytes is too short", 0);

    // The end-of-central-directory record sits in the last 22 + 65535 bytes.
    const uint64_t lowest = n > 22 + 65535 ? n - 22 - 65535 : 0;
    uint64_t eocd = UINT64_MAX;
    for (uint64_t p = n - 22 + 1; p-- > lowest;) {
        if (le<uint32_t>(b.data() + p) == kEocdSig) {
            eocd = p;
            break;
        }
    }
    if (eocd == UINT64_MAX)
        return fail("no end-of-central-directory record (truncated archive?)", n);

    uint64_t entries = le<uint16_t>(b.data() + eocd + 10);
    uint64_t cdSize = le<uint32_t>(b.data() + eocd + 12);
    uint64_t cdOffset = le<uint32_t>(b.data() + eocd + 16);
    if (eocd >= 20 && le<uint32_t>(b.data() + eocd - 20) == kZip64LocatorSig) {
        const uint64_t z64 = le<uint64_t>(b.data() + eocd - 20 + 8);
        if (z64 > n || n - z64 < 56 || le<uint32_t>(b.data() + z64) != kZip64EocdSig)
            return fail("ZIP64 locator points at no ZIP64 record", eocd - 20);
        entries = le<uint64_t>(b.data() + z64 + 32);
        cdSize = le<uint64_t>(b.data() + z64 + 40);
        cdOffset = le<uint64_t>(b.data() + z64 + 48);
    }
    if (cdOffset > n || cdSize > n - cdOffset)
        return fail("central directory [" + std::to_string(cdOffset) + ", +" +
                        std::to_string(cdSize) + ") lies outside the archive",
                    eocd);
    // Each central entry takes at least 46 bytes: bounds the count before we reserve anything.
    if (entries > cdSize / 46)
        return fail("central directory claims " + std::to_string(entries) + " entries in " +
                        std::to_string(cdSize) + " bytes",
                    eocd);

    ZipArchive z;
    z.m_bytes = b;
    z.m_base = base;
    z.m_records.reserve(size_t(entries));
    uint64_t p = cdOffset;
    const uint64_t cdEnd = cdOffset + cdSize;
    for (uint64_t i = 0; i < entries; ++i) {
        if (cdEnd - p < 46 || le<uint32_t>(b.data() + p) != kCentralSig)
            return fail("bad central directory entry " + std::to_string(i), p);
        const uint16_t method = le<uint16_t>(b.data() + p + 10);
        uint64_t csize = le<uint32_t>(b.data() + p + 20);
        uint64_t usize = le<uint32_t>(b.data() + p + 24);
        const uint16_t nameLen = le<uint16_t>(b.data() + p + 28);
        const uint16_t extraLen = le<uint16_t>(b.data() + p + 30);
        const uint16_t commentLen = le<uint16_t>(b.data() + p + 32);
        uint64_t local = le<uint32_t>(b.data() + p + 42);
        const uint64_t entryLen = 46ull + nameLen + extraLen + commentLen;
        if (cdEnd - p < entryLen)
            return fail("central directory entry " + std::to_string(i) + " runs past its end", p);
        std::string name(reinterpret_cast<const char *>(b.data() + p + 46), nameLen);
        // ZIP64 extra field: the 64-bit values appear only for fields that hold 0xFFFFFFFF.
        const uint8_t *x = b.data() + p + 46 + nameLen;
        for (uint64_t q = 0; q + 4 <= extraLen;) {
            const uint16_t id = le<uint16_t>(x + q), len = le<uint16_t>(x + q + 2);
            if (q + 4 + len > extraLen)
                break;
            if (id == 0x0001) {
                uint64_t r = q + 4;
                auto take = [&](uint64_t &field) {
                    if (field == 0xffffffffu && r + 8 <= q + 4 + len) {
                        field = le<uint64_t>(x + r);
                        r += 8;
                    }
                };
                take(usize);
                take(csize);
                take(local);
            }
            q += 4 + len;
        }
        if (local > n || n - local < 30 || le<uint32_t>(b.data() + local) != kLocalSig)
            return fail("record '" + name + "' has no local header", local);
        const uint64_t dataOff =
            local + 30 + le<uint16_t>(b.data() + local + 26) + le<uint16_t>(b.data() + local + 28);
        if (dataOff > n || csize > n - dataOff)
            return fail("record '" + name + "' (" + std::to_string(csize) +
                            " bytes) runs past the end of the archive",
                        local);
        if (method != 0)
            return makeError(Error::Code::Unsupported,
                             "zip: record '" + name + "' is compressed (method " +
                                 std::to_string(method) + "); torch.save stores records")
                .atOffset(base + local);
        if (i == 0)
            z.m_prefix = name.substr(0, name.find('/'));
        if (name.size() > z.m_prefix.size() &&
            name.compare(0, z.m_prefix.size(), z.m_prefix) == 0 && name[z.m_prefix.size()] == '/')
            name.erase(0, z.m_prefix.size() + 1);
        z.m_records.push_back({std::move(name), dataOff, csize});
        p += entryLen;
    }
    return z;
}

const ZipArchive::Record *ZipArchive::find(std::string_view name) const
{
    for (const Record &r : m_records)
        if (r.name == name)
            return &r;
    return nullptr;
}

Result<std::span<const uint8_t>> ZipArchive::data(std::string_view name) const
{
    const Record *r = find(name);
    if (!r)
        return makeError(Error::Code::Format, "zip: archive '" + m_prefix + "' has no record '" +
                                                  std::string(name) + "'")
            .atOffset(m_base);
    return m_bytes.subspan(r->offset, r->size);
}

} // namespace shardscope::detail
