// SPDX-License-Identifier: MIT
#include "fix/picklewriter.h"

namespace shardscope::detail {

namespace {

// Opcodes of protocols 0–4 (Lib/pickle.py).
enum : uint8_t {
    Mark = '(',
    Stop = '.',
    None = 'N',
    BinInt = 'J',
    BinInt1 = 'K',
    BinInt2 = 'M',
    BinUnicode = 'X',
    Global = 'c',
    EmptyDict = '}',
    EmptyList = ']',
    EmptyTuple = ')',
    Tuple = 't',
    SetItems = 'u',
    Appends = 'e',
    Build = 'b',
    Reduce = 'R',
    BinGet = 'h',
    LongBinGet = 'j',
    Proto = 0x80,
    NewObj = 0x81,
    Tuple1 = 0x85,
    NewTrue = 0x88,
    NewFalse = 0x89,
    Long1 = 0x8a,
    ShortBinUnicode = 0x8c,
    Memoize = 0x94,
};

} // namespace

PickleWriter::PickleWriter()
{
    op(Proto);
    op(4);
}

void PickleWriter::setSink(std::function<void(std::string &&)> sink, size_t bytes)
{
    m_sink = std::move(sink);
    m_pieceBytes = bytes;
    m_out.reserve(bytes + bytes / 4);
}

void PickleWriter::flush()
{
    std::string piece;
    piece.reserve(m_pieceBytes + m_pieceBytes / 4);
    std::swap(piece, m_out);
    m_sink(std::move(piece));
}

std::string PickleWriter::finish()
{
    op(Stop);
    if (m_sink) {
        std::string last = m_out;
        m_sink(std::move(m_out));
        m_out.clear();
        return last;
    }
    return std::move(m_out);
}

void PickleWriter::u32(uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        m_out.push_back(char((v >> (8 * i)) & 0xff));
}

void PickleWriter::none()
{
    op(None);
}

void PickleWriter::boolean(bool b)
{
    op(b ? NewTrue : NewFalse);
}

void PickleWriter::integer(int64_t v)
{
    if (v >= 0 && v < 256) {
        op(BinInt1);
        m_out.push_back(char(v));
        return;
    }
    if (v >= 0 && v < 65536) {
        op(BinInt2);
        m_out.push_back(char(v & 0xff));
        m_out.push_back(char(v >> 8));
        return;
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
        op(BinInt);
        u32(uint32_t(int32_t(v)));
        return;
    }
    // LONG1: little-endian two's complement, as few bytes as keep the sign.
    char bytes[8];
    uint64_t u = uint64_t(v);
    for (int i = 0; i < 8; ++i)
        bytes[i] = char((u >> (8 * i)) & 0xff);
    int n = 8;
    while (n > 1) {
        const bool top = (bytes[n - 1] == 0 && !(bytes[n - 2] & 0x80)) ||
                         (bytes[n - 1] == char(0xff) && (bytes[n - 2] & 0x80));
        if (!top)
            break;
        --n;
    }
    op(Long1);
    m_out.push_back(char(n));
    m_out.append(bytes, size_t(n));
}

void PickleWriter::str(std::string_view s)
{
    if (s.size() < 256) {
        op(ShortBinUnicode);
        m_out.push_back(char(s.size()));
    } else {
        op(BinUnicode);
        u32(uint32_t(s.size()));
    }
    m_out.append(s);
}

void PickleWriter::get(uint32_t slot)
{
    if (slot < 256) {
        op(BinGet);
        m_out.push_back(char(slot));
    } else {
        op(LongBinGet);
        u32(slot);
    }
}

uint32_t PickleWriter::memoize()
{
    op(Memoize);
    return m_next++;
}

uint32_t PickleWriter::memoStr(std::string_view s)
{
    str(s);
    return memoize();
}

uint32_t PickleWriter::sharedStr(std::string_view s)
{
    if (auto it = m_strings.find(s); it != m_strings.end()) {
        get(it->second);
        return it->second;
    }
    str(s);
    const uint32_t slot = memoize();
    m_strings.emplace(s, slot);
    return slot;
}

void PickleWriter::global(std::string_view module, std::string_view name)
{
    std::string id;
    id.reserve(module.size() + name.size() + 1);
    id.append(module).push_back('\n');
    id.append(name);
    if (auto it = m_globals.find(id); it != m_globals.end()) {
        get(it->second);
        return;
    }
    op(Global);
    m_out.append(id).push_back('\n');
    const uint32_t slot = memoize();
    m_globals.emplace(std::move(id), slot);
}

void PickleWriter::global(std::string_view module, std::string_view name, uint32_t &cache)
{
    if (cache == kNoSlot) {
        global(module, name);
        cache = m_globals.find(std::string(module) + '\n' + std::string(name))->second;
        return;
    }
    get(cache);
}

void PickleWriter::mark()
{
    op(Mark);
}
void PickleWriter::tuple()
{
    op(Tuple);
}
void PickleWriter::tuple1()
{
    op(Tuple1);
}
void PickleWriter::emptyTuple()
{
    op(EmptyTuple);
}
void PickleWriter::emptyDict()
{
    op(EmptyDict);
}
void PickleWriter::emptyList()
{
    op(EmptyList);
}
void PickleWriter::setItems()
{
    op(SetItems);
}
void PickleWriter::appends()
{
    op(Appends);
}
void PickleWriter::newObj()
{
    op(NewObj);
}
void PickleWriter::reduce()
{
    op(Reduce);
}
void PickleWriter::build()
{
    op(Build);
}

} // namespace shardscope::detail
