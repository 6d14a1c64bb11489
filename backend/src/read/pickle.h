// SPDX-License-Identifier: MIT
#pragma once

#include "read/hotvector.h"
#include "shardscope/pyvalue.h"
#include "shardscope/result.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardscope::detail {

/**
 * A decoded pickle value: a tagged 64-bit word. Small ints, short strings (as a reference into
 * the stream), None, booleans and the empty tuple live in the word itself; everything else is an
 * index into the arena's nodes. DCP metadata is millions of tiny objects whose fields are mostly
 * ints and memoised strings, so keeping those out of the arena is what makes parsing fast.
 */
using NodeId = uint64_t;

inline constexpr NodeId kNil = 7; // tag 7: no value

enum class NodeKind : uint8_t {
    None,
    Bool,
    Int,
    BigInt, // little-endian two's complement bytes (LONG1/LONG4 beyond 61 bits)
    Float,
    Str,
    Bytes,
    Tuple,
    List,
    Dict,
    Set,
    FrozenSet,
    Global,
    Object, // NEWOBJ/REDUCE result: class or callable, args, state (BUILD), extra items
    PersId,
};

namespace pickleimpl {
class PickleMachine; // picklemachine.h
} // namespace pickleimpl

/**
 * The decoded pickle. Strings point into the stream (zero copy), so the arena must not outlive
 * the bytes it was parsed from. Nothing is executed while decoding; a handful of well-known
 * reductions (OrderedDict, set, _codecs.encode for protocol-2 bytes, torch.Size) are interpreted
 * natively because they only build containers.
 */
class PickleArena
{
public:
    NodeId root() const { return m_root; }
    std::span<const uint8_t> stream() const { return m_stream; }
    /** Bytes of the stream up to and including STOP: where a following pickle starts. */
    uint64_t length() const { return m_length; }
    NodeKind kind(NodeId v) const;
    /** Byte offset (within the whole file) of the opcode that made the value, when known. */
    uint64_t offsetOf(NodeId v) const;
    uint64_t baseOffset() const { return m_base; }

    int64_t integer(NodeId v) const;
    double real(NodeId v) const;
    /** Str, Bytes, BigInt raw bytes. */
    std::string_view bytes(NodeId v) const;
    bool isStr(NodeId v) const { return kind(v) == NodeKind::Str; }
    bool isInt(NodeId v) const { return kind(v) == NodeKind::Int || kind(v) == NodeKind::Bool; }

    /**
     * Tuples of one to three small non-negative ints (shapes and chunk offsets: the bulk of DCP
     * metadata) are packed into the word too: tag 5, count in bits 3-4, the ints above.
     */
    static bool isIntTuple(NodeId v) { return (v & 7) == 5; }
    static unsigned intTupleCount(NodeId v) { return unsigned((v >> 3) & 3); }
    static NodeId intTupleItem(NodeId v, unsigned i)
    {
        const unsigned n = intTupleCount(v);
        const unsigned bits = n == 1 ? 59 : n == 2 ? 29 : 19;
        const uint64_t x = (v >> (5 + bits * i)) & ((uint64_t(1) << bits) - 1);
        return (x << 3) | 1; // an inline int
    }

    /** Values that are arena nodes (containers, objects…) have a dense index for side tables. */
    bool isNode(NodeId v) const { return (v & 7) == 0; }
    uint32_t nodeIndex(NodeId v) const { return uint32_t(v >> 3); }

    /** Number of items (dict: pairs). */
    uint64_t size(NodeId v) const;
    /** Calls f(item) for tuple/list/set items. */
    template<typename F>
    void forEachItem(NodeId v, F &&f) const
    {
        if (isIntTuple(v)) {
            const unsigned n = intTupleCount(v);
            for (unsigned i = 0; i < n; ++i)
                f(intTupleItem(v, i));
            return;
        }
        forEachRange(v, [&](const NodeId *p, uint32_t n) {
            for (uint32_t i = 0; i < n; ++i)
                f(p[i]);
        });
    }
    /** Calls f(key, value) for dict pairs. */
    template<typename F>
    void forEachPair(NodeId v, F &&f) const
    {
        forEachRange(v, [&](const NodeId *p, uint32_t n) {
            for (uint32_t i = 0; i + 1 < n; i += 2)
                f(p[i], p[i + 1]);
        });
    }
    std::vector<NodeId> items(NodeId v) const;
    /** Item i of a tuple/list (kNil when out of range). */
    NodeId item(NodeId v, uint64_t i) const;
    /** Value for a string key of a Dict; for an Object, of its dict state. kNil when absent. */
    NodeId get(NodeId v, std::string_view key) const;
    /**
     * get() for hot loops: pickles memoise repeated key strings, so the key is usually the very
     * same value every time; `seen` remembers it and most lookups compare one integer.
     */
    NodeId get(NodeId v, std::string_view key, NodeId &seen) const;

    std::string_view globalModule(NodeId v) const { return bytes(node(v).x); }
    std::string_view globalName(NodeId v) const { return bytes(node(v).y); }
    bool isGlobal(NodeId v, std::string_view module, std::string_view name) const;

    NodeId objClass(NodeId v) const
    {
        return isRecord(v) ? m_recordClass[recordKind(v)] : node(v).x;
    }
    NodeId objArgs(NodeId v) const;
    NodeId objState(NodeId v) const { return isRecord(v) ? kNil : node(v).y; }
    NodeId objExtra(NodeId v) const;

    /**
     * DCP metadata is millions of ChunkStorageMetadata, MetadataIndex and _StorageInfo objects.
     * Each is decoded as usual, then at BUILD folded into a record of its fields (tag 6: kind
     * and position in m_recordFields) and the nodes, pool entries and memo slots it used are
     * taken back. A record reads like the object it was (kind Object, get() by field name).
     */
    static bool isRecord(NodeId v) { return (v & 7) == 6; }
    static unsigned recordKind(NodeId v) { return unsigned((v >> 3) & 3); }
    NodeId recordField(NodeId v, unsigned i) const { return m_recordFields[(v >> 5) + i]; }
    enum RecordKind : unsigned { ChunkRecord = 0, IndexRecord = 1, StorageRecord = 2 };
    /** Field `i` of a record of that kind, else get(v, key, seen): for hot loops. */
    NodeId field(NodeId v, RecordKind kind, unsigned i, std::string_view key, NodeId &seen) const
    {
        if (isRecord(v) && recordKind(v) == kind)
            return recordField(v, i);
        return get(v, key, seen);
    }
    /** "module.name" of an Object's class/callable ("" when it is not a Global). */
    std::string className(NodeId v) const;
    NodeId persId(NodeId v) const { return node(v).x; }

    /** Reads ints out of a tuple/list of ints (torch.Size, shapes). */
    Result<std::vector<int64_t>> intTuple(NodeId v) const;
    /** Same without allocating: false unless `v` is a tuple/list of exactly out.size() ints. */
    bool intTupleInto(NodeId v, std::span<int64_t> out) const;

    /**
     * Converts to a public value, bounded in depth and in total size (cycles, and shared
     * references beyond the budget, end in a Truncated node).
     */
    PyValue toPyValue(NodeId v, int maxDepth = 64, size_t maxNodes = 1u << 20) const;

    size_t nodeCount() const { return m_nodes.size(); }
    /** Records read by the fast path (PickleLimits::fastRecords), for tests and benches. */
    size_t fastRecordCount() const { return m_fastRecords; }
    /** The decoder's memo, emptied (PickleLimits::keepMemo; else nothing). */
    HotVector<char> takeSpare() { return std::move(m_spare); }

    /**
     * Values that live entirely in their word (ints, strings and bytes as stream references, None,
     * booleans, small int tuples, kNil) can be read without the arena, so from any thread while
     * the decoder is still growing it. These take the stream the value came from.
     */
    static bool isSelfContained(NodeId v) { return (v & 7) != 0 && (v & 7) != 6; }
    static bool isWordStr(NodeId v) { return (v & 7) == 2; }
    static bool isWordInt(NodeId v) { return (v & 7) == 1; }
    static int64_t wordInt(NodeId v) { return int64_t(v) >> 3; }
    static std::string_view wordBytes(std::span<const uint8_t> stream, NodeId v)
    {
        return {reinterpret_cast<const char *>(stream.data()) + (v >> 24),
                size_t((v >> 3) & ((uint64_t(1) << 21) - 1))};
    }
    /** intTupleInto() for a self-contained value. */
    static bool wordIntTupleInto(NodeId v, std::span<int64_t> out)
    {
        if (v == kEmptyTupleWord)
            return out.empty();
        if (!isIntTuple(v) || intTupleCount(v) != out.size())
            return false;
        for (unsigned i = 0; i < out.size(); ++i)
            out[i] = int64_t(intTupleItem(v, i)) >> 3;
        return true;
    }
    static constexpr NodeId kTrueWord = (1 << 3) | 4, kFalseWord = (2 << 3) | 4,
                            kEmptyTupleWord = (3 << 3) | 4;

private:
    friend class pickleimpl::PickleMachine;
    static constexpr uint32_t kNoSegment = UINT32_MAX;
    // Node::flags
    static constexpr uint8_t kOwned = 1;   // Str/Bytes: bytes live in m_owned, not the stream
    static constexpr uint8_t kSingle = 2;  // container: one pool range, x = start | count << 32
    static constexpr uint8_t kChain = 4;   // container: segments, x = first | last << 32
    static constexpr uint8_t kHasArgs = 8; // object: the next node's x holds the args
    struct Node
    {
        NodeKind kind = NodeKind::None;
        uint8_t flags = 0;
        uint32_t pos = 0; // opcode offset within the stream (saturated)
        // container: see flags, y = count; global: module, name; object: class, state;
        // str: offset, length; float: bits; persid: pid
        uint64_t x = 0;
        uint64_t y = 0;
    };
    struct Segment
    {
        uint32_t start;
        uint32_t count;
        uint32_t next;
    };
    const Node &node(NodeId v) const { return m_nodes[nodeIndex(v)]; }
    template<typename F>
    void forEachRange(NodeId v, F &&f) const
    {
        if (!isNode(v))
            return;
        const Node &n = node(v);
        if (n.flags & kSingle) {
            f(m_pool.data() + uint32_t(n.x), uint32_t(n.x >> 32));
        } else if (n.flags & kChain) {
            for (uint32_t s = uint32_t(n.x); s != kNoSegment; s = m_segments[s].next)
                f(m_pool.data() + m_segments[s].start, m_segments[s].count);
        }
    }
    PyValue toPyValueImpl(NodeId v, int depth, std::vector<NodeId> &stack, size_t &budget) const;

    std::span<const uint8_t> m_stream;
    uint64_t m_base = 0;
    HotVector<Node> m_nodes;
    std::vector<Segment> m_segments;
    HotVector<NodeId> m_pool;
    HotVector<NodeId> m_recordFields;
    NodeId m_recordClass[3] = {7, 7, 7};             // kNil until a record of that kind exists
    std::unordered_map<uint32_t, NodeId> m_objExtra; // rare: NEWOBJ_EX kwargs, dict subclasses
    std::string m_owned;
    NodeId m_root = kNil;
    uint64_t m_length = 0;
    size_t m_fastRecords = 0;
    HotVector<char> m_spare;
};

/**
 * Takes the items of big named dicts (DCP's state_dict_metadata, planner_data and storage_data:
 * millions of pairs) as the decoder makes them, so that a reader can index them on another core
 * while the rest decodes, instead of walking the finished dicts afterwards.
 */
class DictSink
{
public:
    virtual ~DictSink() = default;
    /**
     * One SETITEM(S) batch for `dict`, a dict that is the value of the string key `name` in a
     * dict being built, and the file offset of that opcode. Called on the decoder's thread,
     * which waits: the arena may be read now, but not after returning (it grows and moves).
     * Returns true when it took the pairs; they then never reach the dict.
     */
    virtual bool offer(const PickleArena &arena, std::string_view name, NodeId dict,
                       std::span<const NodeId> pairs, uint64_t offset) = 0;
};

struct PickleLimits
{
    size_t maxStack = 1u << 20;
    size_t maxMarks = 1u << 16;
    size_t maxMemo = 1u << 28;
    /** Keep DCP's per-chunk dataclasses as compact records (see PickleArena::isRecord). */
    bool compactRecords = true;
    /** Read the usual shape of those straight into records, not opcode by opcode (same
     *  result; off only to check that). */
    bool fastRecords = true;
    /** From this stream size on, a helper thread maps the arenas' next pages (see Prefaulter). */
    size_t prefaultFrom = size_t(32) << 20;
    /** Offered the items of named dicts (see DictSink). */
    DictSink *dictSink = nullptr;
    /** Keep the memo's memory in the arena for the caller (PickleArena::takeSpare). */
    bool keepMemo = false;
};

/**
 * Decodes one pickle (protocols 2 to 5). `baseOffset` is where the stream starts in its file, so
 * that errors name file offsets. The returned arena references `stream`.
 */
Result<PickleArena> parsePickle(std::span<const uint8_t> stream, uint64_t baseOffset = 0,
                                const PickleLimits &limits = {});

} // namespace shardscope::detail
