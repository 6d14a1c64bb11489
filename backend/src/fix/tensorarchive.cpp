// SPDX-License-Identifier: MIT
#include "fix/tensorarchive.h"

#include <array>

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

void TorchPickle::ints(const std::vector<int64_t> &v)
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

void TorchPickle::tensor(DType dtype, const std::vector<int64_t> &shape, std::string_view key)
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

std::string tensorPickle(DType dtype, const std::vector<int64_t> &shape)
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

// A stored (uncompressed) entry's local header; the data starts 64-byte aligned, as torch
// aligns its records (an extra field of padding, which readers skip).
} // namespace

std::string zipLocalHeader(const ZipRecord &r, uint64_t at)
{
    std::string h;
    le(h, 0x04034b50, 4);
    le(h, 20, 2);   // version needed: 2.0
    le(h, 0, 2);    // flags
    le(h, 0, 2);    // stored
    le(h, 0, 2);    // time
    le(h, 0x21, 2); // date: 1980-01-01
    le(h, r.crc, 4);
    le(h, r.size, 4);
    le(h, r.size, 4);
    le(h, r.name.size(), 2);
    size_t pad = (64 - (at + 30 + r.name.size()) % 64) % 64;
    if (pad > 0 && pad < 4)
        pad += 64;
    le(h, pad, 2);
    h += r.name;
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
    std::string h;
    le(h, 0x02014b50, 4);
    le(h, 20, 2);
    le(h, 20, 2);
    le(h, 0, 2);
    le(h, 0, 2);
    le(h, 0, 2);
    le(h, 0x21, 2);
    le(h, r.crc, 4);
    le(h, r.size, 4);
    le(h, r.size, 4);
    le(h, r.name.size(), 2);
    le(h, 0, 2); // extra
    le(h, 0, 2); // comment
    le(h, 0, 2); // disk
    le(h, 0, 2); // internal attributes
    le(h, 0, 4); // external attributes
    le(h, r.offset, 4);
    h += r.name;
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
    le(end, 0x06054b50, 4);
    le(end, 0, 2);
    le(end, 0, 2);
    le(end, records.size(), 2);
    le(end, records.size(), 2);
    le(end, central.size(), 4);
    le(end, at, 4);
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

TensorArchive tensorArchive(DType dtype, const std::vector<int64_t> &shape, uint32_t crc)
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

} // namespace shardscope::detail
