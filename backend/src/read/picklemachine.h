// SPDX-License-Identifier: MIT
// The pickle machine's insides, shared by its files: pickle.cpp runs the opcodes,
// pickleobjects.cpp rebuilds Python's and torch's objects (globals, REDUCE, DCP's per-chunk
// dataclasses folded into records), picklearena.cpp reads the values back. Private to read/.
#pragma once

#include "read/pickle.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardscope::detail::pickleimpl {

// Value tags (low 3 bits).
constexpr uint64_t kTagNode = 0, kTagInt = 1, kTagStr = 2, kTagBytes = 3, kTagSpecial = 4,
                   kTagIntTuple = 5;
constexpr NodeId kNone = (0 << 3) | kTagSpecial;
constexpr NodeId kTrue = PickleArena::kTrueWord;
constexpr NodeId kFalse = PickleArena::kFalseWord;
constexpr NodeId kEmptyTuple = PickleArena::kEmptyTupleWord;
constexpr NodeId kReclaimed = (4 << 3) | kTagSpecial; // memo only: see reclaimArgs
constexpr int64_t kInlineIntMax = (int64_t(1) << 60) - 1;
constexpr int64_t kInlineIntMin = -(int64_t(1) << 60);
constexpr uint64_t kInlineStrMaxLen = (uint64_t(1) << 21) - 1;
constexpr uint64_t kInlineStrMaxOffset = (uint64_t(1) << 40) - 1;

inline uint64_t tag(NodeId v)
{
    return v & 7;
}
inline NodeId inlineInt(int64_t i)
{
    return (uint64_t(i) << 3) | kTagInt;
}
inline NodeId inlineStr(uint64_t tagBits, uint64_t offset, uint64_t len)
{
    return (offset << 24) | (len << 3) | tagBits;
}

constexpr uint64_t kTagRecord = 6;
// The record kinds and their fields, in the order torch's instances hold them (a dict in any
// other order is left as it is, so a record always decodes to what the plain object would).
struct RecordSpec
{
    std::string_view className;
    unsigned fieldCount;
    std::string_view fields[4];
};
constexpr RecordSpec kRecordSpecs[3] = {
    {"ChunkStorageMetadata", 2, {"offsets", "sizes", {}, {}}},
    {"MetadataIndex", 3, {"fqn", "index", "offset", {}}},
    {"_StorageInfo", 4, {"relative_path", "offset", "length", "transform_descriptors"}},
};

inline uint32_t saturate32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : uint32_t(v);
}

/** LONG1/LONG4 bytes of at most 8 (little-endian two's complement) as an int. */
inline int64_t smallLong(const uint8_t *b, uint64_t n)
{
    uint64_t u = 0;
    for (uint64_t i = 0; i < n; ++i)
        u |= uint64_t(b[i]) << (8 * i);
    if (n > 0 && n < 8 && (b[n - 1] & 0x80))
        u |= ~uint64_t(0) << (8 * n); // sign-extend
    return int64_t(u);
}
/** Little-endian two's complement (LONG1/LONG4) to decimal text. */
std::string bigIntDecimal(std::string_view le);
/** Whether a global exists only to run code (os.system, builtins.eval, …). */
bool isForbiddenGlobal(std::string_view module, std::string_view name);

// The virtual machine. Every length it reads is checked against the bytes that remain, every
// index against what exists, and it never recurses, so no input can make it allocate more than a
// small multiple of the input size or overflow the C++ stack. Hot paths report failure through
// m_error and a false return, keeping the common case free of Error construction.
class PickleMachine
{
public:
    PickleMachine(PickleArena &arena, std::span<const uint8_t> s, uint64_t base,
                  const PickleLimits &limits)
        : A(arena)
        , m_s(s)
        , m_limits(limits)
    {
        A.m_stream = s;
        A.m_base = base;
        // Generous reservations cost only address space (pages are touched as used), and they
        // avoid copying hundreds of megabytes when a big metadata file outgrows a guess.
        A.m_nodes.reserve(std::min<size_t>(s.size() / 12 + 16, size_t(1) << 28));
        A.m_pool.reserve(std::min<size_t>(s.size() / 5 + 16, size_t(1) << 29));

        m_stack.reserve(256);
        // Protocol 4 memoises nearly every object: DCP metadata has one memo entry per few bytes.
        m_memo.reserve(std::min<size_t>(s.size() / 6 + 16, size_t(1) << 28));
        A.m_recordFields.reserve(std::min<size_t>(s.size() / 24 + 16, size_t(1) << 28));
    }

    Status run();
    /** Leaves the memo's block, emptied, to the arena (see PickleLimits::keepMemo). */
    void spareMemo() { A.m_spare = std::move(m_memo).reuseAs<char>(); }

private:
    using Node = PickleArena::Node;

    bool fail(std::string msg, Error::Code code = Error::Code::Format)
    {
        if (!m_error)
            m_error = makeError(code, "pickle: " + std::move(msg)).atOffset(A.m_base + m_op);
        return false;
    }
    [[gnu::always_inline]] bool need(uint64_t n)
    {
        if (n <= m_s.size() - m_p) [[likely]]
            return true;
        return truncated(n);
    }
    [[gnu::noinline, gnu::cold]] bool truncated(uint64_t n)
    {
        return fail("truncated: opcode needs " + std::to_string(n) + " more bytes than remain");
    }
    template<typename T>
    T readLE()
    {
        T v{};
        std::memcpy(&v, m_s.data() + m_p, sizeof(T));
        m_p += sizeof(T);
        return v;
    }
    [[gnu::always_inline]] NodeId newNode(NodeKind k, uint64_t x = 0, uint64_t y = 0)
    {
        Node n;
        n.kind = k;
        n.pos = saturate32(m_op);
        n.x = x;
        n.y = y;
        A.m_nodes.push_back(n);
        return NodeId(A.m_nodes.size() - 1) << 3;
    }
    // Packs ints into an inline int tuple when they fit (see PickleArena::isIntTuple).
    static bool packInts(const NodeId *items, size_t n, NodeId &out)
    {
        if (n == 0 || n > 3)
            return false;
        const unsigned bits = n == 1 ? 59 : n == 2 ? 29 : 19;
        uint64_t v = kTagIntTuple | (uint64_t(n) << 3);
        for (size_t i = 0; i < n; ++i) {
            const NodeId x = items[i];
            if (tag(x) != kTagInt)
                return false;
            const int64_t iv = int64_t(x) >> 3;
            if (iv < 0 || uint64_t(iv) >> bits)
                return false;
            v |= uint64_t(iv) << (5 + bits * i);
        }
        out = v;
        return true;
    }
    bool packIntTuple(size_t from, NodeId &out) const
    {
        return packInts(m_stack.data() + from, m_stack.size() - from, out);
    }
    NodeId newTuple(size_t from)
    {
        NodeId packed;
        if (packIntTuple(from, packed)) {
            m_stack.resize(from);
            return packed;
        }
        return newContainer(NodeKind::Tuple, from);
    }
    NodeId newContainer(NodeKind k, size_t from)
    {
        NodeId id = newNode(k);
        appendItems(id, from);
        return id;
    }
    // Dataclass instances (NEWOBJ with no args) take one node; others keep args beside it.
    NodeId newObject(NodeId cls, NodeId args, NodeId extra = kNil)
    {
        const NodeId parts[3] = {cls, args, extra};
        noteEscapes(parts, parts + 3);
        NodeId id = newNode(NodeKind::Object, cls, kNil);
        if (args != kEmptyTuple) {
            A.m_nodes.back().flags |= PickleArena::kHasArgs;
            newNode(NodeKind::None, args);
        }
        if (extra != kNil)
            A.m_objExtra[A.nodeIndex(id)] = extra;
        return id;
    }
    NodeId newStr(NodeKind k, uint64_t offset, uint64_t len)
    {
        if (len <= kInlineStrMaxLen && offset <= kInlineStrMaxOffset)
            return inlineStr(k == NodeKind::Str ? kTagStr : kTagBytes, offset, len);
        return newNode(k, offset, len);
    }
    NodeId newInt(int64_t i)
    {
        if (i >= kInlineIntMin && i <= kInlineIntMax)
            return inlineInt(i);
        return newNode(NodeKind::Int, uint64_t(i));
    }
    // Moves stack[from..] into the container's item list.
    void appendItems(NodeId c, size_t from)
    {
        const size_t count = m_stack.size() - from;
        if (count == 0)
            return;
        // An object waiting to become a record must own everything made after it began; a
        // container from before it that grows now would lose items to the fold's rollback.
        if (!m_pending.empty() && A.nodeIndex(c) < m_pending.back().node)
            m_pending.clear();
        const uint32_t poolEnd = uint32_t(A.m_pool.size());
        noteEscapes(m_stack.begin() + from, m_stack.end());
        A.m_pool.append(m_stack.begin() + from, m_stack.end());
        m_stack.resize(from);
        Node &node = A.m_nodes[A.nodeIndex(c)];
        node.y += node.kind == NodeKind::Dict ? count / 2 : count;
        if (!(node.flags & (PickleArena::kSingle | PickleArena::kChain))) {
            node.flags |= PickleArena::kSingle;
            node.x = poolEnd | (uint64_t(count) << 32);
            return;
        }
        if (node.flags & PickleArena::kSingle) {
            const uint32_t start = uint32_t(node.x), n = uint32_t(node.x >> 32);
            if (start + n == poolEnd) { // APPEND in a loop: extend in place
                node.x = start | (uint64_t(n + count) << 32);
                return;
            }
            A.m_segments.push_back({start, n, PickleArena::kNoSegment});
            const uint32_t first = uint32_t(A.m_segments.size() - 1);
            node.flags = uint8_t((node.flags & ~PickleArena::kSingle) | PickleArena::kChain);
            node.x = first | (uint64_t(first) << 32);
        }
        const uint32_t last = uint32_t(node.x >> 32);
        auto &seg = A.m_segments[last];
        if (seg.start + seg.count == poolEnd) {
            seg.count += uint32_t(count);
            return;
        }
        A.m_segments.push_back({poolEnd, uint32_t(count), PickleArena::kNoSegment});
        const uint32_t added = uint32_t(A.m_segments.size() - 1);
        A.m_segments[last].next = added;
        node.x = (node.x & 0xffffffffu) | (uint64_t(added) << 32);
    }
    size_t floor() const { return m_marks.empty() ? 0 : m_marks.back(); }
    bool popMark(size_t &m)
    {
        if (m_marks.empty())
            return fail("MARK expected but the mark stack is empty");
        m = m_marks.back();
        m_marks.pop_back();
        return true;
    }
    bool pop(NodeId &v)
    {
        if (m_stack.size() <= floor())
            return fail("stack underflow");
        v = m_stack.back();
        m_stack.pop_back();
        return true;
    }
    [[gnu::noinline, gnu::cold]] bool stackTooDeep()
    {
        return fail("stack deeper than " + std::to_string(m_limits.maxStack), Error::Code::Limit);
    }
    [[gnu::always_inline]] bool push(NodeId n)
    {
        if (m_stack.size() >= m_limits.maxStack) [[unlikely]]
            return stackTooDeep();
        m_stack.push_back(n);
        return true;
    }
    [[gnu::always_inline]] bool memoPut(uint64_t idx)
    {
        if (idx == m_memo.size() && !m_stack.empty()) [[likely]] {
            m_memo.push_back(m_stack.back());
            return true;
        }
        return memoPutSlow(idx);
    }
    [[gnu::noinline]] bool memoPutSlow(uint64_t idx)
    {
        if (m_stack.empty())
            return fail("memo store with an empty stack");
        if (idx >= m_limits.maxMemo)
            return fail("memo index " + std::to_string(idx) + " out of bounds", Error::Code::Limit);
        const NodeId v = m_stack.back();
        if (idx != m_memo.size()) {
            // Python only ever appends to the memo. A stream that does anything else (a
            // hand-made one) gets no more taking back: a slot nobody tracks could keep a value
            // that a fold, reclaimArgs or reclaimSunk would drop.
            m_memoRewritten = true;
            m_pending.clear();
        }
        if (idx < m_memo.size()) {
            noteEscapes(&v, &v + 1); // an older slot: reclaimSunk only looks at newer ones
            m_memo[idx] = v;
        } else if (idx == m_memo.size()) {
            m_memo.push_back(v);
        } else if (idx < m_memo.size() + 4096) {
            m_memo.resize(idx + 1, kNil);
            m_memo[idx] = v;
        } else {
            m_sparseMemo[idx] = v;
        }
        return true;
    }
    [[gnu::always_inline]] bool memoGet(uint64_t idx)
    {
        if (idx < m_memo.size()) [[likely]] {
            const NodeId v = m_memo[idx];
            if (v != kNil && v != kReclaimed) [[likely]] {
                if (!push(v))
                    return false;
                // A record class followed by NEWOBJ's empty args: read the object straight.
                if (tag(v) == kTagNode && m_p < m_s.size() && m_s[m_p] == ')') [[unlikely]]
                    for (unsigned k = 0; k < 3; ++k)
                        if (v == m_fastClass[k]) {
                            readRecord(k);
                            break;
                        }
                return true;
            }
        }
        return memoGetSlow(idx);
    }
    [[gnu::noinline]] bool memoGetSlow(uint64_t idx)
    {
        NodeId v = kNil;
        if (idx < m_memo.size())
            v = m_memo[idx];
        else if (auto it = m_sparseMemo.find(idx); it != m_sparseMemo.end())
            v = it->second;
        if (v == kNil)
            return fail("memo key " + std::to_string(idx) + " was never stored");
        if (v == kReclaimed)
            return fail("memo key " + std::to_string(idx) +
                            " refers to a value dropped while decoding (the arguments of a "
                            "torch.Size call, or a storage_data record)",
                        Error::Code::Unsupported);
        return push(v);
    }
    // torch.Size(dims) is the most common call in DCP metadata, and its one-item args tuple is
    // garbage once reduced. Python never references an args tuple again, so when it is the
    // newest node we take it back; its memo slot (if any) is poisoned so a hand-made pickle
    // that does reference it fails cleanly instead of seeing a different value.
    void reclaimArgs(NodeId args);
    // At NEWOBJ: if the class is one of DCP's per-chunk dataclasses, remember where the arena
    // stands, so that BUILD can fold the object into a record.
    void noteRecordCandidate(NodeId cls);

    void foldRecord(NodeId target, NodeId state);

    // The fast path for DCP's per-chunk dataclasses (picklerecords.cpp). With the class just
    // pushed, reads `) NEWOBJ … SETITEMS BUILD` of the usual shape straight into a record,
    // leaving the memo and the stack as the opcodes would have; false (and nothing changed)
    // for anything else, which the opcodes then decode.
    bool readRecord(unsigned kind);
    bool readKey(NodeId &out);
    bool readValue(NodeId &out);
    bool readInts(NodeId *ints, size_t &n);
    bool readTuple(NodeId &out);
    bool readMemoRef(NodeId &out);
    bool readStr(NodeId &out);
    void optionalMemo(NodeId v)
    {
        if (m_p < m_s.size() && m_s[m_p] == 0x94) {
            m_memo.push_back(v);
            ++m_p;
        }
    }
    bool m_memoRewritten = false; // see memoPutSlow
    // Classes whose objects readRecord takes (kNil: none yet), and torch.Size's global.
    NodeId m_fastClass[3] = {kNil, kNil, kNil};
    NodeId m_sizeClass = kNil, m_notSizeClass = kNil;

    // A batch for a dict that is the value of a string key ([..., "name", dict, pairs...]) goes
    // to the sink first: true when it took it.
    bool offerToSink(NodeId target, size_t from)
    {
        if (from < 2 || tag(m_stack[from - 2]) != kTagStr)
            return false;
        const NodeId k0 = m_stack[from];
        if (!m_limits.dictSink->offer(A, A.bytes(m_stack[from - 2]), target,
                                      std::span(m_stack.data() + from, m_stack.size() - from),
                                      A.m_base + m_op))
            return false;
        m_stack.resize(from);
        if (A.isRecord(k0) && A.recordKind(k0) == PickleArena::IndexRecord)
            reclaimSunk(k0);
        return true;
    }
    // The records of a storage_data batch the sink took are garbage: Python never refers to a
    // storage_data key or value again. When they are the newest records and nothing else holds
    // one, take their fields back (two thirds of a big file's records) and poison their memo
    // slots, as reclaimArgs does.
    void reclaimSunk(NodeId k0)
    {
        const Mark first = m_firstRecord;
        m_firstRecord = {};
        const uint64_t f0 = k0 >> 5;
        if (m_memoRewritten || first.field != f0 || first.memo > m_memo.size() ||
            (m_escaped != UINT64_MAX && m_escaped >= f0))
            return;
        auto ours = [&](NodeId v) { return A.isRecord(v) && (v >> 5) >= f0; };
        for (NodeId v : m_stack) // below the batch (a hand-made stream can leave one there)
            if (ours(v))
                return;
        for (size_t i = first.memo; i < m_memo.size(); ++i)
            if (ours(m_memo[i]))
                m_memo[i] = kReclaimed;
        for (auto &[k, v] : m_sparseMemo)
            if (ours(v))
                v = kReclaimed;
        A.m_recordFields.resize(f0);
    }

    bool addTo(NodeId target, size_t from, bool pairs);
    bool doReduce(NodeId callable, NodeId args);
    bool dictFrom(NodeId src, bool pairs, NodeId &result);
    // collections.OrderedDict and Counter: NEWOBJ makes an empty dict of them (their __new__
    // takes no items), which SETITEMS then fills.
    bool isDictClass(NodeId cls)
    {
        if (cls == m_notDictClass || A.kind(cls) != NodeKind::Global)
            return false;
        const std::string_view name = A.globalName(cls);
        if (A.globalModule(cls) == "collections" && (name == "OrderedDict" || name == "Counter"))
            return true;
        m_notDictClass = cls;
        return false;
    }
    NodeId m_notDictClass = kNil;
    bool makeGlobal(NodeId module, NodeId name);
    bool bytesFromLatin1(NodeId text, NodeId &out);
    [[gnu::always_inline]] inline bool step(uint8_t op);

    PickleArena &A;
    std::span<const uint8_t> m_s;
    PickleLimits m_limits;
    uint64_t m_p = 0;
    uint64_t m_op = 0;
    bool m_done = false;
    std::optional<Error> m_error;
    // Objects that may become records at their BUILD: where the arena stood when each began.
    struct Pending
    {
        uint32_t node, pool, segments, kind;
        size_t memo, stack; // stack: where the object itself sits
    };
    std::vector<Pending> m_pending;
    NodeId m_recordClassSeen[3] = {kNil, kNil, kNil};
    NodeId m_fieldKeySeen[3][4] = {
        {kNil, kNil, kNil, kNil}, {kNil, kNil, kNil, kNil}, {kNil, kNil, kNil, kNil}};
    NodeId m_otherClassSeen = kNil;
    // The first record folded since the last batch went to the sink: its fields' position, and
    // the memo's size when its object began (see reclaimSunk).
    struct Mark
    {
        uint64_t field = UINT64_MAX;
        size_t memo = 0;
    } m_firstRecord;
    // The newest record stored anywhere but the stack and the memo (in a container, an object,
    // another record): such a record may be referred to again, so it is never taken back.
    uint64_t m_escaped = UINT64_MAX;
    [[gnu::always_inline]] void noteEscapes(const NodeId *first, const NodeId *last)
    {
        for (; first != last; ++first)
            if ((*first & 7) == kTagRecord) [[unlikely]]
                m_escaped =
                    m_escaped == UINT64_MAX ? (*first >> 5) : std::max(m_escaped, *first >> 5);
    }
    HotVector<NodeId> m_stack;
    std::vector<size_t> m_marks;
    HotVector<NodeId> m_memo;
    std::unordered_map<uint64_t, NodeId> m_sparseMemo;
};

} // namespace shardscope::detail::pickleimpl
