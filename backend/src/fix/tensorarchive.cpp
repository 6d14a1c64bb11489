// SPDX-License-Identifier: MIT
#include "fix/tensorarchive.h"

#include <array>
#include <cstdlib>

namespace shardscope::detail {

TorchPickle::TorchPickle()
{
    op('\x80'); // PROTO 2, as torch.save writes
    op('\x02');
}

std::string TorchPickle::finish()
{
    op('.');
    return std::move(m_out);
}

void TorchPickle::global(std::string_view module, std::string_view name)
{
    op('c');
    m_out.append(module).push_back('\n');
    m_out.append(name).push_back('\n');
}

void TorchPickle::get(uint64_t slot)
{
    if (slot < 256) {
        op('h');
        le(slot, 1);
    } else {
        op('j');
        le(slot, 4);
    }
}

void TorchPickle::str(std::string_view s)
{
    op('X');
    le(uint64_t(s.size()), 4);
    m_out.append(s);
}

void TorchPickle::integer(int64_t v)
{
    if (v >= 0 && v < 256) {
        op('K');
        le(uint64_t(v), 1);
    } else if (v >= 0 && v < 65536) {
        op('M');
        le(uint64_t(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        op('J');
        le(uint64_t(uint32_t(int32_t(v))), 4);
    } else {
        op('\x8a'); // LONG1: eight bytes of two's complement
        le(8, 1);
        le(uint64_t(v), 8);
    }
}

void TorchPickle::ints(std::span<const int64_t> v)
{
    op('(');
    for (int64_t x : v)
        integer(x);
    op('t');
}

void TorchPickle::le(uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        m_out.push_back(char((v >> (8 * i)) & 0xff));
}

void TorchPickle::tensor(DType dtype, std::span<const int64_t> shape, std::string_view key)
{
    TorchPickle &p = *this;
    int64_t numel = 1;
    for (int64_t d : shape)
        numel *= d;
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;)
        strides[d - 1] = strides[d] * std::max<int64_t>(shape[d], 1);
    // Dtypes with a legacy storage class are rebuilt by _rebuild_tensor_v2 from a typed storage
    // of `numel` elements; the others by _rebuild_tensor_v3 from bytes and the dtype.
    const std::string_view storage = storageClassName(dtype);
    p.global("torch._utils", storage.empty() ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');
    p.str("storage");
    if (storage.empty())
        p.global("torch.storage", "UntypedStorage");
    else
        p.global("torch", storage);
    p.str(key);
    p.str("cpu");
    p.integer(storage.empty() ? numel * elementSize(dtype) : numel);
    p.op('t');
    p.op('Q'); // BINPERSID: the storage record data/<key>
    p.integer(0);
    p.ints(shape);
    p.ints(strides);
    p.op('\x89'); // requires_grad = False
    p.global("collections", "OrderedDict");
    p.op(')');
    p.op('R');
    if (storage.empty())
        p.global("torch", dtypeName(dtype));
    p.op('t');
    p.op('R');
}

namespace {

std::string tensorPickle(DType dtype, std::span<const int64_t> shape)
{
    TorchPickle p;
    p.tensor(dtype, shape, "0");
    return p.finish();
}

void le(std::string &out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        out.push_back(char((v >> (8 * i)) & 0xff));
}

// Past 32 bits a field holds 0xffffffff and the value goes in a ZIP64 extra field, as torch's
// writer does for a record of 4 GiB or more (SHARDSCOPE_FORCE_ZIP64 takes that path always, so
// that the tests read it back without writing gigabytes).
constexpr uint64_t kMax32 = 0xffffffffu;

bool forceZip64()
{
    static const bool force = std::getenv("SHARDSCOPE_FORCE_ZIP64") != nullptr;
    return force;
}

bool big(uint64_t v)
{
    return v >= kMax32 || forceZip64();
}

} // namespace

std::string zipLocalHeader(const ZipRecord &r, uint64_t at)
{
    const bool zip64 = big(r.size);
    std::string extra;
    if (zip64) {
        le(extra, 0x0001, 2);
        le(extra, 16, 2);
        le(extra, r.size, 8); // uncompressed
        le(extra, r.size, 8); // compressed
    }
    std::string h;
    le(h, 0x04034b50, 4);
    le(h, zip64 ? 45 : 20, 2); // version needed: 4.5 for ZIP64, else 2.0
    le(h, 0, 2);               // flags
    le(h, 0, 2);               // stored
    le(h, 0, 2);               // time
    le(h, 0x21, 2);            // date: 1980-01-01
    le(h, r.crc, 4);
    le(h, zip64 ? kMax32 : r.size, 4);
    le(h, zip64 ? kMax32 : r.size, 4);
    le(h, r.name.size(), 2);
    size_t pad = (64 - (at + 30 + r.name.size() + extra.size()) % 64) % 64;
    if (pad > 0 && pad < 4)
        pad += 64;
    le(h, extra.size() + pad, 2);
    h += r.name;
    h += extra;
    if (pad > 0) {
        le(h, 0x4246, 2); // "FB", torch's padding field
        le(h, pad - 4, 2);
        h.append(pad - 4, 'Z');
    }
    return h;
}

namespace {

std::string centralEntry(const ZipRecord &r)
{
    std::string extra;
    if (big(r.size)) {
        le(extra, r.size, 8);
        le(extra, r.size, 8);
    }
    if (big(r.offset))
        le(extra, r.offset, 8);
    if (!extra.empty()) {
        std::string head;
        le(head, 0x0001, 2);
        le(head, extra.size(), 2);
        extra = head + extra;
    }
    std::string h;
    le(h, 0x02014b50, 4);
    le(h, extra.empty() ? 20 : 45, 2);
    le(h, extra.empty() ? 20 : 45, 2);
    le(h, 0, 2);
    le(h, 0, 2);
    le(h, 0, 2);
    le(h, 0x21, 2);
    le(h, r.crc, 4);
    le(h, big(r.size) ? kMax32 : r.size, 4);
    le(h, big(r.size) ? kMax32 : r.size, 4);
    le(h, r.name.size(), 2);
    le(h, extra.size(), 2);
    le(h, 0, 2); // comment
    le(h, 0, 2); // disk
    le(h, 0, 2); // internal attributes
    le(h, 0, 4); // external attributes
    le(h, big(r.offset) ? kMax32 : r.offset, 4);
    h += r.name;
    h += extra;
    return h;
}

const std::array<uint32_t, 256> &crcTable()
{
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    return table;
}

} // namespace

std::string zipDirectory(const std::vector<ZipRecord> &records, uint64_t at)
{
    std::string central;
    for (const ZipRecord &r : records)
        central += centralEntry(r);
    std::string end = central;
    const bool zip64 = records.size() >= 0xffff || big(central.size()) || big(at);
    if (zip64) {
        // The ZIP64 end record, then its locator, before the classic end record.
        const uint64_t here = at + central.size();
        le(end, 0x06064b50, 4);
        le(end, 44, 8); // the record's size after this field
        le(end, 45, 2);
        le(end, 45, 2);
        le(end, 0, 4);
        le(end, 0, 4);
        le(end, records.size(), 8);
        le(end, records.size(), 8);
        le(end, central.size(), 8);
        le(end, at, 8);
        le(end, 0x07064b50, 4);
        le(end, 0, 4);
        le(end, here, 8);
        le(end, 1, 4);
    }
    le(end, 0x06054b50, 4);
    le(end, 0, 2);
    le(end, 0, 2);
    le(end, zip64 ? 0xffff : records.size(), 2);
    le(end, zip64 ? 0xffff : records.size(), 2);
    le(end, zip64 ? kMax32 : central.size(), 4);
    le(end, zip64 ? kMax32 : at, 4);
    le(end, 0, 2);
    return end;
}

uint32_t crc32(std::span<const std::byte> data, uint32_t crc)
{
    const auto &t = crcTable();
    crc = ~crc;
    for (std::byte b : data)
        crc = t[(crc ^ uint32_t(b)) & 0xff] ^ (crc >> 8);
    return ~crc;
}

TensorArchive tensorArchive(DType dtype, std::span<const int64_t> shape, uint32_t crc)
{
    const auto crcOf = [](std::string_view s) {
        return crc32(std::as_bytes(std::span(s.data(), s.size())));
    };
    uint64_t bytes = uint64_t(elementSize(dtype));
    for (int64_t d : shape)
        bytes *= uint64_t(d);
    const std::string pickle = tensorPickle(dtype, shape);
    const std::string byteorder = "little", version = "3\n";
    std::vector<ZipRecord> records = {{"archive/data.pkl", crcOf(pickle), pickle.size()},
                                      {"archive/byteorder", crcOf(byteorder), byteorder.size()},
                                      {"archive/data/0", crc, bytes},
                                      {"archive/version", crcOf(version), version.size()}};
    const std::string_view contents[] = {pickle, byteorder, {}, version};
    TensorArchive a;
    std::string *out = &a.head;
    uint64_t at = 0;
    for (size_t i = 0; i < records.size(); ++i) {
        records[i].offset = at;
        const std::string h = zipLocalHeader(records[i], at);
        *out += h;
        at += h.size() + records[i].size;
        if (i == 2)
            out = &a.tail; // the tensor's bytes go between head and tail
        else
            *out += contents[i];
    }
    a.tail += zipDirectory(records, at);
    return a;
}

std::string stringListArchive(const std::vector<std::string> &items)
{
    const auto crcOf = [](std::string_view s) {
        return crc32(std::as_bytes(std::span(s.data(), s.size())));
    };
    TorchPickle p;
    p.op(']'); // EMPTY_LIST
    if (!items.empty()) {
        p.op('('); // MARK
        for (const std::string &s : items)
            p.str(s);
        p.op('e'); // APPENDS
    }
    const std::string pickle = p.finish();
    const std::string byteorder = "little", version = "3\n";
    std::vector<ZipRecord> records = {{"archive/data.pkl", crcOf(pickle), pickle.size()},
                                      {"archive/byteorder", crcOf(byteorder), byteorder.size()},
                                      {"archive/version", crcOf(version), version.size()}};
    const std::string_view contents[] = {pickle, byteorder, version};
    std::string out;
    for (size_t i = 0; i < records.size(); ++i) {
        records[i].offset = out.size();
        out += zipLocalHeader(records[i], out.size());
        out += contents[i];
    }
    out += zipDirectory(records, out.size());
    return out;
}

} // namespace shardscope::detail
