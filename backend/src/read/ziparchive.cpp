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

bool isUtf8(std::string_view s)
{
    // Strict, as Python decodes it: no overlong forms, no surrogates, nothing past U+10FFFF.
    for (size_t i = 0; i < s.size();) {
        const uint8_t c = uint8_t(s[i]);
        size_t n = 0;
        uint32_t cp = 0, min = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (s.size() - i <= n)
            return false;
        for (size_t k = 1; k <= n; ++k) {
            const uint8_t d = uint8_t(s[i + k]);
            if ((d & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

bool looksLikeZip(std::span<const uint8_t> b)
{
    return b.size() >= 4 && le<uint32_t>(b.data()) == kLocalSig;
}

Result<ZipArchive> ZipArchive::parse(std::span<const uint8_t> b, uint64_t base)
{
    SpanSource source(b);
    auto z = parse(source, base);
    if (z)
        z->m_bytes = b;
    return z;
}

Result<ZipArchive> ZipArchive::parse(ByteSource &src, uint64_t base)
{
    auto fail = [&](std::string msg, uint64_t at) {
        return makeError(Error::Code::Format, "zip: " + std::move(msg)).atOffset(base + at);
    };
    const uint64_t n = src.size();
    if (n < 22)
        return fail("archive of " + std::to_string(n) + " bytes is too short", 0);
    // Every access is checked against the archive first, so a source gives only what exists.
    auto unreadable = [&](uint64_t at) { return fail("bytes could not be read", at); };

    // The end-of-central-directory record sits in the last 22 + 65535 bytes; torch writes no
    // comment, so the last 4 KiB first (what the item check reads of an item's end).
    const uint64_t lowest = n > 22 + 65535 ? n - 22 - 65535 : 0;
    uint64_t eocd = UINT64_MAX;
    for (uint64_t from : {n > 4096 ? std::max(lowest, n - 4096) : lowest, lowest}) {
        const uint8_t *tail = src.at(from, n - from);
        if (!tail)
            return unreadable(from);
        for (uint64_t p = n - 22 + 1; p-- > from;)
            if (le<uint32_t>(tail + (p - from)) == kEocdSig) {
                eocd = p;
                break;
            }
        if (eocd != UINT64_MAX || from == lowest)
            break;
    }
    if (eocd == UINT64_MAX)
        return fail("no end-of-central-directory record (truncated archive?)", n);

    const uint8_t *e = src.at(eocd, 22);
    if (!e)
        return unreadable(eocd);
    uint64_t entries = le<uint16_t>(e + 10), entriesHere = le<uint16_t>(e + 8);
    uint64_t cdSize = le<uint32_t>(e + 12);
    uint64_t cdOffset = le<uint32_t>(e + 16);
    uint32_t disk = le<uint16_t>(e + 4), cdDisk = le<uint16_t>(e + 6);
    if (eocd >= 20) {
        const uint8_t *loc = src.at(eocd - 20, 20);
        if (!loc)
            return unreadable(eocd - 20);
        // As miniz reads it (torch's reader): a locator that points past the archive is an
        // error; one that points at no ZIP64 record leaves the 32-bit fields in force.
        if (le<uint32_t>(loc) == kZip64LocatorSig) {
            const uint64_t z64 = le<uint64_t>(loc + 8);
            if (z64 > n || n - z64 < 56)
                return fail("ZIP64 locator points past the archive", eocd - 20);
            const uint8_t *r = src.at(z64, 56);
            if (!r)
                return unreadable(z64);
            if (le<uint32_t>(r) == kZip64EocdSig) {
                if (le<uint64_t>(r + 4) < 44 || le<uint32_t>(loc + 16) != 1)
                    return fail("ZIP64 end record is malformed or spans disks", z64);
                disk = le<uint32_t>(r + 16);
                cdDisk = le<uint32_t>(r + 20);
                entriesHere = le<uint64_t>(r + 24);
                entries = le<uint64_t>(r + 32);
                cdSize = le<uint64_t>(r + 40);
                cdOffset = le<uint64_t>(r + 48);
            }
        }
    }
    if (entriesHere != entries || ((disk | cdDisk) != 0 && (disk != 1 || cdDisk != 1)))
        return fail("archive spans disks (its end record says " + std::to_string(entriesHere) +
                        " of " + std::to_string(entries) + " entries here)",
                    eocd);
    if (cdOffset > n || cdSize > n - cdOffset)
        return fail("central directory [" + std::to_string(cdOffset) + ", +" +
                        std::to_string(cdSize) + ") lies outside the archive",
                    eocd);
    // Each central entry takes at least 46 bytes: bounds the count before we reserve anything.
    if (entries > cdSize / 46)
        return fail("central directory claims " + std::to_string(entries) + " entries in " +
                        std::to_string(cdSize) + " bytes",
                    eocd);
    const uint8_t *cd = src.at(cdOffset, cdSize);
    if (!cd)
        return unreadable(cdOffset);

    ZipArchive z;
    z.m_base = base;
    z.m_records.reserve(size_t(entries));
    uint64_t p = 0; // within the central directory
    for (uint64_t i = 0; i < entries; ++i) {
        if (cdSize - p < 46 || le<uint32_t>(cd + p) != kCentralSig)
            return fail("bad central directory entry " + std::to_string(i), cdOffset + p);
        const uint16_t method = le<uint16_t>(cd + p + 10);
        uint64_t csize = le<uint32_t>(cd + p + 20);
        uint64_t usize = le<uint32_t>(cd + p + 24);
        const uint16_t nameLen = le<uint16_t>(cd + p + 28);
        const uint16_t extraLen = le<uint16_t>(cd + p + 30);
        const uint16_t commentLen = le<uint16_t>(cd + p + 32);
        uint64_t local = le<uint32_t>(cd + p + 42);
        const uint64_t entryLen = 46ull + nameLen + extraLen + commentLen;
        if (cdSize - p < entryLen)
            return fail("central directory entry " + std::to_string(i) + " runs past its end",
                        cdOffset + p);
        std::string name(reinterpret_cast<const char *>(cd + p + 46), nameLen);
        // ZIP64 extra field: the 64-bit values appear only for fields that hold 0xFFFFFFFF.
        const uint8_t *x = cd + p + 46 + nameLen;
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
        // What miniz (torch's reader) refuses in a central entry: a stored record whose sizes
        // differ (it tests the method and the time after it as one 32-bit word), one on
        // another disk, one masked (encrypted).
        if ((le<uint32_t>(cd + p + 10) == 0 && csize != usize) || (usize && !csize))
            return fail("record '" + name + "' is stored with two sizes (" + std::to_string(csize) +
                            " and " + std::to_string(usize) + ")",
                        cdOffset + p);
        if (const uint16_t on = le<uint16_t>(cd + p + 34); on != 0 && on != 1)
            return fail("record '" + name + "' lies on disk " + std::to_string(on), cdOffset + p);
        if (le<uint16_t>(cd + p + 8) & 0x2041)
            return fail("record '" + name + "' is encrypted", cdOffset + p);
        const uint8_t *lh = local <= n && n - local >= 30 ? src.at(local, 30) : nullptr;
        if (local <= n && n - local >= 30 && !lh)
            return unreadable(local);
        if (!lh || le<uint32_t>(lh) != kLocalSig)
            return fail("record '" + name + "' has no local header", local);
        const uint64_t dataOff = local + 30 + le<uint16_t>(lh + 26) + le<uint16_t>(lh + 28);
        if (dataOff > n || csize > n - dataOff || usize > n - dataOff)
            return fail("record '" + name + "' (" + std::to_string(csize) +
                            " bytes) runs past the end of the archive",
                        local);
        if (method != 0)
            return makeError(Error::Code::Unsupported,
                             "zip: record '" + name + "' is compressed (method " +
                                 std::to_string(method) + "); torch.save stores records")
                .atOffset(base + local);
        // Every record lies in the first one's folder (torch's reader lists them all, and
        // raises on one outside it).
        // torch lists the records' names as Python strings.
        if (!isUtf8(name))
            return fail("record name is not UTF-8", cdOffset + p);
        if (i == 0) {
            if (name.find('/') == std::string::npos)
                return fail("record '" + name + "' is not in a folder", cdOffset + p);
            z.m_prefix = name.substr(0, name.find('/'));
        }
        if (name.size() <= z.m_prefix.size() ||
            name.compare(0, z.m_prefix.size(), z.m_prefix) != 0 || name[z.m_prefix.size()] != '/')
            return fail("record '" + name + "' is not in the archive's folder '" + z.m_prefix + "'",
                        cdOffset + p);
        name.erase(0, z.m_prefix.size() + 1);
        // A stored record's bytes are its uncompressed size (what torch's reader allocates).
        z.m_records.push_back({std::move(name), dataOff, usize});
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
