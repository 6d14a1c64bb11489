// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/pyvalue.h"
#include "shardscope/result.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail {

using NodeId = uint32_t;
inline constexpr NodeId kNil = UINT32_MAX;

enum class NodeKind : uint8_t {
    None,
    Bool,
    Int,
    BigInt, // little-endian two's complement bytes (LONG1/LONG4 beyond 64 bits)
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

/**
 * The decoded pickle: a flat arena of inert nodes. Strings point into the stream (zero copy), so
 * the arena must not outlive the bytes it was parsed from. Nothing is executed while decoding; a
 * handful of well-known reductions (OrderedDict, set, _codecs.encode for protocol-2 bytes,
 * torch.Size) are interpreted natively because they only build containers.
 */
class PickleArena
{
public:
    NodeId root() const { return m_root; }
    NodeKind kind(NodeId n) const { return m_nodes[n].kind; }
    /** Byte offset (within the whole file) of the opcode that made the node. */
    uint64_t offsetOf(NodeId n) const { return m_base + m_nodes[n].pos; }
    uint64_t baseOffset() const { return m_base; }

    int64_t integer(NodeId n) const { return m_nodes[n].i; }
    double real(NodeId n) const { return m_nodes[n].f; }
    /** Str, Bytes, BigInt raw bytes. */
    std::string_view bytes(NodeId n) const;
    bool isStr(NodeId n) const { return kind(n) == NodeKind::Str; }
    bool isInt(NodeId n) const { return kind(n) == NodeKind::Int || kind(n) == NodeKind::Bool; }

    /** Number of items (dict: pairs). */
    uint64_t size(NodeId n) const { return m_nodes[n].count(); }
    /** Calls f(item) for tuple/list/set items, f(key, value) pairs for dicts. */
    template<typename F>
    void forEachItem(NodeId n, F &&f) const
    {
        for (uint32_t s = m_nodes[n].a; s != kNil; s = m_segments[s].next) {
            const Segment &seg = m_segments[s];
            for (uint32_t i = 0; i < seg.count; ++i)
                f(m_pool[seg.start + i]);
        }
    }
    template<typename F>
    void forEachPair(NodeId n, F &&f) const
    {
        for (uint32_t s = m_nodes[n].a; s != kNil; s = m_segments[s].next) {
            const Segment &seg = m_segments[s];
            for (uint32_t i = 0; i + 1 < seg.count; i += 2)
                f(m_pool[seg.start + i], m_pool[seg.start + i + 1]);
        }
    }
    std::vector<NodeId> items(NodeId n) const;
    /** Item i of a tuple/list (kNil when out of range). */
    NodeId item(NodeId n, uint64_t i) const;
    /** Value for a string key of a Dict; for an Object, of its dict state. kNil when absent. */
    NodeId get(NodeId n, std::string_view key) const;

    std::string_view globalModule(NodeId n) const { return bytes(m_nodes[n].a); }
    std::string_view globalName(NodeId n) const { return bytes(m_nodes[n].b); }
    bool isGlobal(NodeId n, std::string_view module, std::string_view name) const;

    NodeId objClass(NodeId n) const { return m_nodes[n].a; }
    NodeId objArgs(NodeId n) const { return m_nodes[n].b; }
    NodeId objState(NodeId n) const { return NodeId(m_nodes[n].u & 0xffffffffu); }
    NodeId objExtra(NodeId n) const { return NodeId(m_nodes[n].u >> 32); }
    /** "module.name" of an Object's class/callable ("" when it is not a Global). */
    std::string className(NodeId n) const;
    NodeId persId(NodeId n) const { return m_nodes[n].a; }

    /** Reads ints out of a tuple/list of ints (torch.Size, shapes). */
    Result<std::vector<int64_t>> intTuple(NodeId n) const;

    /**
     * Converts to a public value, bounded in depth and in total size (cycles, and shared
     * references beyond the budget, end in a Truncated node).
     */
    PyValue toPyValue(NodeId n, int maxDepth = 64, size_t maxNodes = 1u << 20) const;

    size_t nodeCount() const { return m_nodes.size(); }

private:
    friend class PickleMachine;
    struct Node
    {
        NodeKind kind = NodeKind::None;
        uint8_t owned = 0; // Str/Bytes: bytes live in m_owned rather than the stream
        uint32_t a = kNil; // container: first segment; global: module; object: class; str: length
        uint32_t b = kNil; // container: last segment; global: name; object: args
        uint32_t pos = 0;  // opcode offset within the stream (saturated)
        union
        {
            int64_t i;
            double f;
            uint64_t u; // container: item count; object: state | extra << 32; str: offset
        };
        Node()
            : u(0)
        {}
        uint64_t count() const { return u; }
    };
    struct Segment
    {
        uint32_t start;
        uint32_t count;
        uint32_t next;
    };
    PyValue toPyValueImpl(NodeId n, int depth, std::vector<NodeId> &stack, size_t &budget) const;

    std::span<const uint8_t> m_stream;
    uint64_t m_base = 0;
    std::vector<Node> m_nodes;
    std::vector<Segment> m_segments;
    std::vector<NodeId> m_pool;
    std::string m_owned;
    NodeId m_root = kNil;
};

struct PickleLimits
{
    size_t maxStack = 1u << 20;
    size_t maxMarks = 1u << 16;
    size_t maxMemo = 1u << 28;
};

/**
 * Decodes one pickle (protocols 2 to 5). `baseOffset` is where the stream starts in its file, so
 * that errors name file offsets. The returned arena references `stream`.
 */
Result<PickleArena> parsePickle(std::span<const uint8_t> stream, uint64_t baseOffset = 0,
                                const PickleLimits &limits = {});

} // namespace shardscope::detail
