// SPDX-License-Identifier: MIT
#include "read/pickle.h"
#include "read/prefaulter.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <unordered_map>

namespace shardscope::detail {

namespace {

// Globals that only ever appear in a pickle to run code. We never call anything, but naming one
// is a sure sign of a hostile or broken file, so we stop and say so.
bool isForbiddenGlobal(std::string_view module, std::string_view name)
{
    static constexpr std::array modules = {
        "os",      "posix",    "nt",       "subprocess",     "sys",
        "shutil",  "socket",   "runpy",    "importlib",      "pty",
        "code",    "marshal",  "ctypes",   "webbrowser",     "pickle",
        "_pickle", "commands", "platform", "multiprocessing"};
    static constexpr std::array builtins = {
        "eval",    "exec",   "compile", "__import__", "open",    "execfile", "input", "breakpoint",
        "globals", "locals", "vars",    "setattr",    "delattr", "exit",     "quit",  "help"};
    std::string_view top = module.substr(0, module.find('.'));
    for (const char *m : modules)
        if (top == m)
            return true;
    if (module == "builtins" || module == "__builtin__" || module == "__builtins__")
        for (const char *b : builtins)
            if (name == b)
                return true;
    return false;
}

uint32_t saturate32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : uint32_t(v);
}

// Little-endian two's complement (LONG1/LONG4) to decimal text, by long division.
std::string bigIntDecimal(std::string_view le)
{
    std::vector<uint8_t> mag(le.begin(), le.end()); // little-endian
    const bool negative = !mag.empty() && (mag.back() & 0x80);
    if (negative) { // magnitude = ~x + 1
        unsigned carry = 1;
        for (uint8_t &b : mag) {
            unsigned t = unsigned(uint8_t(~b)) + carry;
            b = uint8_t(t);
            carry = t >> 8;
        }
    }
    while (!mag.empty() && mag.back() == 0)
        mag.pop_back();
    std::string digits;
    while (!mag.empty()) {
        unsigned rem = 0;
        for (size_t i = mag.size(); i-- > 0;) {
            unsigned cur = (rem << 8) | mag[i];
            mag[i] = uint8_t(cur / 10);
            rem = cur % 10;
        }
        digits.push_back(char('0' + rem));
        while (!mag.empty() && mag.back() == 0)
            mag.pop_back();
    }
    if (digits.empty())
        digits = "0";
    if (negative)
        digits.push_back('-');
    return std::string(digits.rbegin(), digits.rend());
}

} // namespace

namespace {

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

} // namespace

NodeKind PickleArena::kind(NodeId v) const
{
    switch (tag(v)) {
    case kTagNode:
        return m_nodes[nodeIndex(v)].kind;
    case kTagRecord:
        return NodeKind::Object;
    case kTagInt:
        return NodeKind::Int;
    case kTagStr:
        return NodeKind::Str;
    case kTagBytes:
        return NodeKind::Bytes;
    case kTagIntTuple:
        return NodeKind::Tuple;
    case kTagSpecial:
        return v == kNone ? NodeKind::None : v == kEmptyTuple ? NodeKind::Tuple : NodeKind::Bool;
    default:
        return NodeKind::None;
    }
}

uint64_t PickleArena::offsetOf(NodeId v) const
{
    return isNode(v) ? m_base + m_nodes[nodeIndex(v)].pos : m_base;
}

int64_t PickleArena::integer(NodeId v) const
{
    if (tag(v) == kTagInt)
        return int64_t(v) >> 3;
    if (v == kTrue)
        return 1;
    if (v == kFalse)
        return 0;
    if (isNode(v) && node(v).kind == NodeKind::Int)
        return int64_t(node(v).x);
    return 0;
}

double PickleArena::real(NodeId v) const
{
    if (!isNode(v) || node(v).kind != NodeKind::Float)
        return double(integer(v));
    double d;
    std::memcpy(&d, &node(v).x, 8);
    return d;
}

std::string_view PickleArena::bytes(NodeId v) const
{
    if (tag(v) == kTagStr || tag(v) == kTagBytes)
        return {reinterpret_cast<const char *>(m_stream.data()) + (v >> 24),
                size_t((v >> 3) & kInlineStrMaxLen)};
    if (!isNode(v))
        return {};
    const Node &n = node(v);
    if (n.flags & kOwned)
        return std::string_view(m_owned).substr(n.x, n.y);
    return {reinterpret_cast<const char *>(m_stream.data()) + n.x, size_t(n.y)};
}

uint64_t PickleArena::size(NodeId v) const
{
    if (isIntTuple(v))
        return intTupleCount(v);
    if (!isNode(v))
        return 0;
    const NodeKind k = node(v).kind;
    return k >= NodeKind::Tuple && k <= NodeKind::FrozenSet ? node(v).y : 0;
}

std::vector<NodeId> PickleArena::items(NodeId n) const
{
    std::vector<NodeId> out;
    out.reserve(size_t(std::min<uint64_t>(size(n), 1u << 20)));
    forEachItem(n, [&](NodeId id) { out.push_back(id); });
    return out;
}

NodeId PickleArena::item(NodeId n, uint64_t i) const
{
    if (isIntTuple(n))
        return i < intTupleCount(n) ? intTupleItem(n, unsigned(i)) : kNil;
    const NodeKind k = kind(n);
    if ((k != NodeKind::Tuple && k != NodeKind::List) || !isNode(n))
        return kNil;
    NodeId out = kNil;
    forEachRange(n, [&](const NodeId *p, uint32_t count) {
        if (out != kNil)
            return;
        if (i < count)
            out = p[i];
        else
            i -= count;
    });
    return out;
}

NodeId PickleArena::get(NodeId n, std::string_view key) const
{
    NodeId seen = kNil;
    return get(n, key, seen);
}

NodeId PickleArena::get(NodeId n, std::string_view key, NodeId &seen) const
{
    if (isRecord(n)) {
        const RecordSpec &spec = kRecordSpecs[recordKind(n)];
        for (unsigned i = 0; i < spec.fieldCount; ++i)
            if (key == spec.fields[i])
                return recordField(n, i);
        return kNil;
    }
    if (n == kNil || !isNode(n))
        return kNil;
    if (kind(n) == NodeKind::Object)
        n = objState(n);
    if (n == kNil || !isNode(n) || kind(n) != NodeKind::Dict)
        return kNil;
    NodeId out = kNil;
    if (seen != kNil)
        forEachRange(n, [&](const NodeId *p, uint32_t count) {
            for (uint32_t i = 0; out == kNil && i + 1 < count; i += 2)
                if (p[i] == seen)
                    out = p[i + 1];
        });
    if (out != kNil)
        return out;
    forEachRange(n, [&](const NodeId *p, uint32_t count) {
        for (uint32_t i = 0; out == kNil && i + 1 < count; i += 2)
            if (kind(p[i]) == NodeKind::Str && bytes(p[i]) == key) {
                seen = p[i];
                out = p[i + 1];
            }
    });
    return out;
}

NodeId PickleArena::objArgs(NodeId v) const
{
    if (isRecord(v))
        return kEmptyTuple;
    return (node(v).flags & kHasArgs) ? m_nodes[nodeIndex(v) + 1].x : kEmptyTuple;
}

NodeId PickleArena::objExtra(NodeId v) const
{
    if (isRecord(v))
        return kNil;
    auto it = m_objExtra.find(nodeIndex(v));
    return it == m_objExtra.end() ? kNil : it->second;
}

bool PickleArena::isGlobal(NodeId n, std::string_view module, std::string_view name) const
{
    return n != kNil && kind(n) == NodeKind::Global && globalModule(n) == module &&
           globalName(n) == name;
}

std::string PickleArena::className(NodeId n) const
{
    NodeId c = objClass(n);
    if (c == kNil || kind(c) != NodeKind::Global)
        return {};
    return std::string(globalModule(c)) + "." + std::string(globalName(c));
}

bool PickleArena::intTupleInto(NodeId n, std::span<int64_t> out) const
{
    if (n == kEmptyTuple)
        return out.empty();
    if (isIntTuple(n)) {
        if (intTupleCount(n) != out.size())
            return false;
        for (unsigned i = 0; i < out.size(); ++i)
            out[i] = int64_t(intTupleItem(n, i)) >> 3;
        return true;
    }
    const NodeKind k = kind(n);
    if ((k != NodeKind::Tuple && k != NodeKind::List) || size(n) != out.size())
        return false;
    size_t i = 0;
    bool ok = true;
    forEachItem(n, [&](NodeId v) {
        if (tag(v) == kTagInt)
            out[i++] = int64_t(v) >> 3;
        else if (kind(v) == NodeKind::Int)
            out[i++] = integer(v);
        else
            ok = false;
    });
    return ok;
}

Result<std::vector<int64_t>> PickleArena::intTuple(NodeId n) const
{
    std::vector<int64_t> out(size_t(std::min<uint64_t>(size(n), 1u << 16)));
    if (n == kNil || !intTupleInto(n, out))
        return makeError(Error::Code::Format, "expected a tuple of ints").atOffset(offsetOf(n));
    return out;
}

PyValue PickleArena::toPyValue(NodeId n, int maxDepth, size_t maxNodes) const
{
    std::vector<NodeId> stack;
    size_t budget = maxNodes;
    return toPyValueImpl(n, maxDepth, stack, budget);
}

PyValue PickleArena::toPyValueImpl(NodeId n, int depth, std::vector<NodeId> &stack,
                                   size_t &budget) const
{
    PyValue v;
    if (n == kNil)
        return v;
    if (budget == 0) {
        v.kind = PyValue::Kind::Truncated;
        v.text = "value larger than the display budget";
        return v;
    }
    --budget;
    if (depth <= 0) {
        v.kind = PyValue::Kind::Truncated;
        v.text = "nesting deeper than the display bound at offset " + std::to_string(offsetOf(n));
        return v;
    }
    const NodeKind k = kind(n);
    const bool container = k >= NodeKind::Tuple && k != NodeKind::Global;
    if (container && std::find(stack.begin(), stack.end(), n) != stack.end()) {
        v.kind = PyValue::Kind::Truncated;
        v.text = "reference cycle";
        return v;
    }
    if (container)
        stack.push_back(n);
    switch (k) {
    case NodeKind::None:
        break;
    case NodeKind::Bool:
        v.kind = PyValue::Kind::Bool;
        v.boolean = integer(n) != 0;
        break;
    case NodeKind::Int:
        v.kind = PyValue::Kind::Int;
        v.integer = integer(n);
        break;
    case NodeKind::BigInt: {
        v.kind = PyValue::Kind::BigInt;
        v.text = bigIntDecimal(bytes(n));
        break;
    }
    case NodeKind::Float:
        v.kind = PyValue::Kind::Float;
        v.real = real(n);
        break;
    case NodeKind::Str:
        v.kind = PyValue::Kind::Str;
        v.text = std::string(bytes(n));
        break;
    case NodeKind::Bytes:
        v.kind = PyValue::Kind::Bytes;
        v.text = std::string(bytes(n));
        break;
    case NodeKind::Tuple:
    case NodeKind::List:
    case NodeKind::Set:
    case NodeKind::FrozenSet:
        v.kind = k == NodeKind::Tuple  ? PyValue::Kind::Tuple
                 : k == NodeKind::List ? PyValue::Kind::List
                                       : PyValue::Kind::Set;
        forEachItem(
            n, [&](NodeId c) { v.items.push_back(toPyValueImpl(c, depth - 1, stack, budget)); });
        break;
    case NodeKind::Dict:
        v.kind = PyValue::Kind::Dict;
        forEachPair(n, [&](NodeId a, NodeId b) {
            v.dict.emplace_back(toPyValueImpl(a, depth - 1, stack, budget),
                                toPyValueImpl(b, depth - 1, stack, budget));
        });
        break;
    case NodeKind::Global:
        v.kind = PyValue::Kind::Global;
        v.text = std::string(globalModule(n));
        v.name = std::string(globalName(n));
        break;
    case NodeKind::Object: {
        v.kind = PyValue::Kind::Object;
        NodeId c = objClass(n);
        if (c != kNil && kind(c) == NodeKind::Global) {
            v.text = std::string(globalModule(c));
            v.name = std::string(globalName(c));
        } else {
            v.name = "<call>";
        }
        v.items.push_back(toPyValueImpl(objArgs(n), depth - 1, stack, budget));
        if (isRecord(n)) { // the dict state it was folded from (absent fields were absent)
            PyValue state;
            state.kind = PyValue::Kind::Dict;
            const RecordSpec &spec = kRecordSpecs[recordKind(n)];
            for (unsigned i = 0; i < spec.fieldCount; ++i) {
                if (recordField(n, i) == kNil)
                    continue;
                PyValue name;
                name.kind = PyValue::Kind::Str;
                name.text = std::string(spec.fields[i]);
                state.dict.emplace_back(std::move(name),
                                        toPyValueImpl(recordField(n, i), depth - 1, stack, budget));
            }
            v.items.push_back(std::move(state));
        } else {
            v.items.push_back(toPyValueImpl(objState(n), depth - 1, stack, budget));
        }
        NodeId extra = objExtra(n);
        if (extra != kNil)
            v.items.push_back(toPyValueImpl(extra, depth - 1, stack, budget));
        break;
    }
    case NodeKind::PersId:
        v.kind = PyValue::Kind::PersistentId;
        v.items.push_back(toPyValueImpl(persId(n), depth - 1, stack, budget));
        break;
    }
    if (container)
        stack.pop_back();
    return v;
}

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

private:
    using Node = PickleArena::Node;

    bool fail(std::string msg, Error::Code code = Error::Code::Format)
    {
        if (!m_error)
            m_error = makeError(code, "pickle: " + std::move(msg)).atOffset(A.m_base + m_op);
        return false;
    }
    bool need(uint64_t n)
    {
        if (n <= m_s.size() - m_p) [[likely]]
            return true;
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
    // Packs stack[from..] into an inline int tuple when it fits (see PickleArena::isIntTuple).
    bool packIntTuple(size_t from, NodeId &out) const
    {
        const size_t n = m_stack.size() - from;
        if (n == 0 || n > 3)
            return false;
        const unsigned bits = n == 1 ? 59 : n == 2 ? 29 : 19;
        uint64_t v = kTagIntTuple | (uint64_t(n) << 3);
        for (size_t i = 0; i < n; ++i) {
            const NodeId x = m_stack[from + i];
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
            if (v != kNil && v != kReclaimed) [[likely]]
                return push(v);
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
    void reclaimArgs(NodeId args)
    {
        if (!A.isNode(args) || A.nodeIndex(args) + 1 != A.m_nodes.size())
            return;
        const PickleArena::Node &n = A.m_nodes.back();
        if (!(n.flags & PickleArena::kSingle) ||
            uint32_t(n.x) + uint32_t(n.x >> 32) != A.m_pool.size())
            return;
        if (!m_memo.empty() && m_memo.back() == args)
            m_memo.back() = kReclaimed;
        for (auto &[k, v] : m_sparseMemo)
            if (v == args)
                v = kReclaimed;
        A.m_pool.resize(uint32_t(n.x));
        A.m_nodes.pop_back();
    }
    // At NEWOBJ: if the class is one of DCP's per-chunk dataclasses, remember where the arena
    // stands, so that BUILD can fold the object into a record.
    void noteRecordCandidate(NodeId cls)
    {
        int kind = -1;
        for (int k = 0; k < 3; ++k)
            if (cls == m_recordClassSeen[k])
                kind = k;
        if (kind < 0) {
            if (cls == m_otherClassSeen || A.kind(cls) != NodeKind::Global)
                return;
            const std::string_view mod = A.globalModule(cls), name = A.globalName(cls);
            for (int k = 0; k < 3 && kind < 0; ++k)
                if (name == kRecordSpecs[k].className &&
                    mod.starts_with("torch.distributed.checkpoint"))
                    kind = k;
            if (kind < 0) {
                m_otherClassSeen = cls;
                return;
            }
            m_recordClassSeen[kind] = cls;
            if (A.m_recordClass[kind] == kNil)
                A.m_recordClass[kind] = cls;
            else if (A.m_recordClass[kind] != cls)
                return; // a second class of that name: keep it generic
        }
        if (m_pending.size() >= 64) // objects that never got a BUILD; start over
            m_pending.clear();
        m_pending.push_back({uint32_t(A.m_nodes.size()), uint32_t(A.m_pool.size()),
                             uint32_t(A.m_segments.size()), uint32_t(kind), m_memo.size(),
                             m_stack.size()});
    }

    void foldRecord(NodeId target, NodeId state)
    {
        const Pending p = m_pending.back();
        if (A.nodeIndex(target) != p.node) {
            if (A.nodeIndex(target) < p.node)
                m_pending.clear(); // stale entries above an older object
            return;
        }
        m_pending.pop_back();
        // The object must be the one value above where it was pushed (not DUP'd): a second
        // reference on the stack would outlive the fold.
        if (m_stack.size() != p.stack + 1)
            return;
        const RecordSpec &spec = kRecordSpecs[p.kind];
        NodeId fields[4] = {kNil, kNil, kNil, kNil};
        // Only a dict of the known fields whose values predate the object (or live in their
        // own words) can be folded: anything the object built itself would be lost.
        auto ownedHere = [&](NodeId v) { return A.isNode(v) && A.nodeIndex(v) >= p.node; };
        if (!A.isNode(state) || A.kind(state) != NodeKind::Dict || A.nodeIndex(state) <= p.node ||
            !A.m_objExtra.empty())
            return;
        bool ok = true;
        int last = -1;
        A.forEachPair(state, [&](NodeId k, NodeId v) {
            if (!ok)
                return;
            if (ownedHere(v)) {
                ok = false;
                return;
            }
            // Field names are memoised strings: usually the very value seen last time.
            NodeId *seen = m_fieldKeySeen[p.kind];
            unsigned i = 0;
            while (i < spec.fieldCount && k != seen[i])
                ++i;
            if (i == spec.fieldCount) {
                if (A.kind(k) != NodeKind::Str) {
                    ok = false;
                    return;
                }
                const std::string_view key = A.bytes(k);
                i = 0;
                while (i < spec.fieldCount && key != spec.fields[i])
                    ++i;
                if (i < spec.fieldCount)
                    seen[i] = k;
            }
            if (i == spec.fieldCount || fields[i] != kNil || (last >= 0 && int(i) <= last)) {
                ok = false;
                return;
            }
            fields[i] = v;
            last = int(i);
        });
        if (!ok)
            return;
        const NodeId record =
            (uint64_t(A.m_recordFields.size()) << 5) | (uint64_t(p.kind) << 3) | kTagRecord;
        noteEscapes(fields, fields + spec.fieldCount);
        if (m_firstRecord.field == UINT64_MAX)
            m_firstRecord = {A.m_recordFields.size(), p.memo};
        A.m_recordFields.append(fields, fields + spec.fieldCount);
        A.m_nodes.resize(p.node);
        A.m_pool.resize(p.pool);
        A.m_segments.resize(p.segments);
        for (size_t i = p.memo; i < m_memo.size(); ++i) {
            const NodeId v = m_memo[i];
            if (v == target)
                m_memo[i] = record;
            else if (A.isNode(v) && A.nodeIndex(v) >= p.node)
                m_memo[i] = kReclaimed; // the state dict: Python never refers to it again
        }
        m_stack.back() = record;
    }

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
        if (first.field != f0 || first.memo > m_memo.size() ||
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

bool PickleMachine::addTo(NodeId target, size_t from, bool pairs)
{
    if (pairs && (m_stack.size() - from) % 2 != 0)
        return fail("odd number of items for a dict");
    NodeKind tk = A.kind(target);
    if (tk == NodeKind::Object) {
        // A dict or list subclass built by NEWOBJ: keep its items beside its state.
        auto [it, inserted] = A.m_objExtra.try_emplace(A.nodeIndex(target), kNil);
        if (inserted)
            it->second = newContainer(pairs ? NodeKind::Dict : NodeKind::List, m_stack.size());
        target = it->second;
        tk = A.kind(target);
    }
    const bool ok = A.isNode(target) &&
                    (pairs ? tk == NodeKind::Dict : (tk == NodeKind::List || tk == NodeKind::Set));
    if (!ok)
        return fail(std::string(pairs ? "SETITEM(S)" : "APPEND(S)/ADDITEMS") +
                    " on a value that is not a " + (pairs ? "dict" : "list or set"));
    if (pairs && m_limits.dictSink && m_stack.size() > from && tk == NodeKind::Dict &&
        offerToSink(target, from))
        return true;
    appendItems(target, from);
    return true;
}

bool PickleMachine::makeGlobal(NodeId module, NodeId name)
{
    if (A.kind(module) != NodeKind::Str || A.kind(name) != NodeKind::Str)
        return fail("global reference with non-string module or name");
    if (isForbiddenGlobal(A.bytes(module), A.bytes(name)))
        return fail("refusing global '" + std::string(A.bytes(module)) + "." +
                        std::string(A.bytes(name)) + "': it exists only to run code",
                    Error::Code::Unsafe);
    return push(newNode(NodeKind::Global, module, name));
}

// Protocol 2 cannot encode bytes directly, so Python writes _codecs.encode(latin1_text, 'latin1').
bool PickleMachine::bytesFromLatin1(NodeId text, NodeId &result)
{
    std::string_view s = A.bytes(text);
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        uint8_t c = uint8_t(s[i]);
        if (c < 0x80) {
            out.push_back(char(c));
        } else if ((c & 0xe0) == 0xc0 && i + 1 < s.size()) {
            uint32_t cp = (uint32_t(c & 0x1f) << 6) | (uint8_t(s[i + 1]) & 0x3f);
            if (cp > 0xff)
                return fail("_codecs.encode: code point beyond latin-1");
            out.push_back(char(cp));
            ++i;
        } else {
            return fail("_codecs.encode: text is not latin-1");
        }
    }
    result = newNode(NodeKind::Bytes, A.m_owned.size(), out.size());
    A.m_nodes.back().flags |= PickleArena::kOwned;
    A.m_owned += out;
    return true;
}

bool PickleMachine::doReduce(NodeId callable, NodeId args)
{
    if (A.kind(callable) == NodeKind::Global) {
        std::string_view mod = A.globalModule(callable), name = A.globalName(callable);
        const NodeKind ak = A.kind(args);
        const uint64_t nargs = ak == NodeKind::Tuple ? A.size(args) : UINT64_MAX;
        const bool builtins = mod == "builtins" || mod == "__builtin__";
        if (mod == "collections" && name == "OrderedDict" && nargs == 0)
            return push(newContainer(NodeKind::Dict, m_stack.size()));
        if (mod == "torch" && name == "Size" && nargs == 1) {
            NodeId dims = A.item(args, 0);
            const NodeKind dk = A.kind(dims);
            if (dk == NodeKind::Tuple || dk == NodeKind::List) {
                reclaimArgs(args);
                return push(dims);
            }
        }
        if (builtins && (name == "set" || name == "frozenset")) {
            NodeId s =
                newContainer(name == "set" ? NodeKind::Set : NodeKind::FrozenSet, m_stack.size());
            if (nargs == 1) {
                NodeId src = A.item(args, 0);
                if (A.kind(src) == NodeKind::List || A.kind(src) == NodeKind::Tuple) {
                    const size_t from = m_stack.size();
                    A.forEachItem(src, [&](NodeId v) { m_stack.push_back(v); });
                    appendItems(s, from);
                }
            }
            return push(s);
        }
        if (((mod == "_codecs" && name == "encode") || (builtins && name == "bytearray")) &&
            nargs == 2 && A.kind(A.item(args, 0)) == NodeKind::Str) {
            NodeId b;
            return bytesFromLatin1(A.item(args, 0), b) && push(b);
        }
        if (builtins && name == "bytes" && nargs == 0)
            return push(inlineStr(kTagBytes, 0, 0));
    }
    return push(newObject(callable, args));
}

inline bool PickleMachine::step(uint8_t op)
{
    switch (op) {
    case 0x80: // PROTO
        if (!need(1))
            return false;
        if (m_s[m_p] > 5)
            return fail("unsupported pickle protocol " + std::to_string(m_s[m_p]),
                        Error::Code::Unsupported);
        ++m_p;
        return true;
    case 0x95: // FRAME: a length hint only
        if (!need(8))
            return false;
        m_p += 8;
        return true;
    case '.': { // STOP
        NodeId v = kNil;
        if (!pop(v))
            return false;
        A.m_root = v;
        A.m_length = m_p;
        m_done = true;
        return true;
    }
    case '(':
        if (m_marks.size() >= m_limits.maxMarks)
            return fail("too many nested MARKs", Error::Code::Limit);
        m_marks.push_back(m_stack.size());
        return true;
    case '0': { // POP
        if (!m_marks.empty() && m_marks.back() == m_stack.size()) {
            m_marks.pop_back();
            return true;
        }
        NodeId v = kNil;
        return pop(v);
    }
    case '1': { // POP_MARK
        size_t m = 0;
        if (!popMark(m))
            return false;
        m_stack.resize(m);
        return true;
    }
    case '2': // DUP
        if (m_stack.size() <= floor())
            return fail("DUP on an empty stack");
        return push(m_stack.back());
    case 'N':
        return push(kNone);
    case 0x88:
        return push(kTrue);
    case 0x89:
        return push(kFalse);
    case 'J': // BININT
        return need(4) && push(newInt(readLE<int32_t>()));
    case 'K':
        return need(1) && push(newInt(readLE<uint8_t>()));
    case 'M':
        return need(2) && push(newInt(readLE<uint16_t>()));
    case 0x8a:   // LONG1
    case 0x8b: { // LONG4
        uint64_t n;
        if (op == 0x8a) {
            if (!need(1))
                return false;
            n = readLE<uint8_t>();
        } else {
            if (!need(4))
                return false;
            const int32_t n4 = readLE<int32_t>();
            if (n4 < 0)
                return fail("LONG4 with negative length");
            n = uint64_t(n4);
        }
        if (!need(n))
            return false;
        NodeId v = kNil;
        if (n <= 8) {
            uint64_t u = 0;
            for (uint64_t i = 0; i < n; ++i)
                u |= uint64_t(m_s[m_p + i]) << (8 * i);
            if (n > 0 && n < 8 && (m_s[m_p + n - 1] & 0x80))
                u |= ~uint64_t(0) << (8 * n); // sign-extend
            v = newInt(int64_t(u));
        } else {
            v = newNode(NodeKind::BigInt, m_p, n);
        }
        m_p += n;
        return push(v);
    }
    case 'G': { // BINFLOAT, big-endian
        if (!need(8))
            return false;
        uint64_t be = 0;
        for (int i = 0; i < 8; ++i)
            be = (be << 8) | m_s[m_p + i];
        m_p += 8;
        return push(newNode(NodeKind::Float, be));
    }
    case 'X':    // BINUNICODE
    case 0x8c:   // SHORT_BINUNICODE
    case 0x8d:   // BINUNICODE8
    case 'T':    // BINSTRING (Python 2 str)
    case 'U':    // SHORT_BINSTRING
    case 'B':    // BINBYTES
    case 'C':    // SHORT_BINBYTES
    case 0x8e:   // BINBYTES8
    case 0x96: { // BYTEARRAY8
        uint64_t n;
        if (op == 0x8c || op == 'U' || op == 'C') {
            if (!need(1))
                return false;
            n = readLE<uint8_t>();
        } else if (op == 'X' || op == 'T' || op == 'B') {
            if (!need(4))
                return false;
            n = readLE<uint32_t>();
        } else {
            if (!need(8))
                return false;
            n = readLE<uint64_t>();
        }
        if (!need(n))
            return false;
        const bool text = op == 'X' || op == 0x8c || op == 0x8d || op == 'T' || op == 'U';
        const NodeId v = newStr(text ? NodeKind::Str : NodeKind::Bytes, m_p, n);
        m_p += n;
        return push(v);
    }
    case ')':
        return push(kEmptyTuple);
    case ']':
        return push(newContainer(NodeKind::List, m_stack.size()));
    case '}':
        return push(newContainer(NodeKind::Dict, m_stack.size()));
    case 0x8f:
        return push(newContainer(NodeKind::Set, m_stack.size()));
    case 0x85:
    case 0x86:
    case 0x87: { // TUPLE1..3
        const size_t n = size_t(op - 0x84);
        if (m_stack.size() < floor() + n)
            return fail("stack underflow");
        return push(newTuple(m_stack.size() - n));
    }
    case 't':
    case 'l':
    case 'd':
    case 0x91: { // TUPLE, LIST, DICT, FROZENSET (from MARK)
        size_t m = 0;
        if (!popMark(m))
            return false;
        const NodeKind nk = op == 't'   ? NodeKind::Tuple
                            : op == 'l' ? NodeKind::List
                            : op == 'd' ? NodeKind::Dict
                                        : NodeKind::FrozenSet;
        if (nk == NodeKind::Dict && (m_stack.size() - m) % 2)
            return fail("odd number of items for DICT");
        if (nk == NodeKind::Tuple)
            return push(m == m_stack.size() ? kEmptyTuple : newTuple(m));
        return push(newContainer(nk, m));
    }
    case 'a': { // APPEND
        if (m_stack.size() < floor() + 2)
            return fail("APPEND without a list");
        return addTo(m_stack[m_stack.size() - 2], m_stack.size() - 1, false);
    }
    case 's': { // SETITEM
        if (m_stack.size() < floor() + 3)
            return fail("SETITEM without a dict");
        return addTo(m_stack[m_stack.size() - 3], m_stack.size() - 2, true);
    }
    case 'e':    // APPENDS
    case 'u':    // SETITEMS
    case 0x90: { // ADDITEMS
        size_t m = 0;
        if (!popMark(m))
            return false;
        if (m == 0 || m > m_stack.size())
            return fail("no container below MARK");
        return addTo(m_stack[m - 1], m, op == 'u');
    }
    case 'c': { // GLOBAL "module\nname\n"
        NodeId parts[2];
        for (NodeId &part : parts) {
            const uint8_t *start = m_s.data() + m_p;
            const size_t avail = size_t(std::min<uint64_t>(m_s.size() - m_p, 4096));
            const void *nl = std::memchr(start, '\n', avail);
            if (!nl)
                return fail("GLOBAL without a newline-terminated name");
            const size_t len = size_t(static_cast<const uint8_t *>(nl) - start);
            part = newStr(NodeKind::Str, m_p, len);
            m_p += len + 1;
        }
        return makeGlobal(parts[0], parts[1]);
    }
    case 0x93: { // STACK_GLOBAL
        NodeId name = kNil, module = kNil;
        return pop(name) && pop(module) && makeGlobal(module, name);
    }
    case 'R': { // REDUCE
        NodeId args = kNil, callable = kNil;
        return pop(args) && pop(callable) && doReduce(callable, args);
    }
    case 0x81: { // NEWOBJ
        NodeId args = kNil, cls = kNil;
        if (!pop(args) || !pop(cls))
            return false;
        if (args == kEmptyTuple && m_limits.compactRecords)
            noteRecordCandidate(cls);
        return push(newObject(cls, args));
    }
    case 0x92: { // NEWOBJ_EX
        NodeId kwargs = kNil, args = kNil, cls = kNil;
        return pop(kwargs) && pop(args) && pop(cls) && push(newObject(cls, args, kwargs));
    }
    case 'b': { // BUILD
        NodeId state = kNil;
        if (!pop(state))
            return false;
        if (m_stack.size() <= floor())
            return fail("BUILD without an object");
        const NodeId target = m_stack.back();
        if (A.isNode(target) && A.kind(target) == NodeKind::Object) {
            noteEscapes(&state, &state + 1);
            A.m_nodes[A.nodeIndex(target)].y = state;
            if (!m_pending.empty())
                foldRecord(target, state);
        }
        return true;
    }
    case 'Q': { // BINPERSID
        NodeId pid = kNil;
        if (!pop(pid))
            return false;
        noteEscapes(&pid, &pid + 1);
        return push(newNode(NodeKind::PersId, pid));
    }
    case 'q':
        return need(1) && memoPut(readLE<uint8_t>());
    case 'r':
        return need(4) && memoPut(readLE<uint32_t>());
    case 0x94: // MEMOIZE
        return memoPut(m_memo.size());
    case 'h':
        return need(1) && memoGet(readLE<uint8_t>());
    case 'j':
        return need(4) && memoGet(readLE<uint32_t>());
    default: {
        static const char *hex = "0123456789abcdef";
        std::string name = "0x";
        name += hex[op >> 4];
        name += hex[op & 15];
        return fail("unsupported opcode " + name, Error::Code::Unsupported);
    }
    }
}

Status PickleMachine::run()
{
    // Big streams: a helper populates the arenas' next pages on the other core while we decode,
    // so that the decoder does not stop on a page fault every 4 KiB. We publish our progress at
    // most every kPublish bytes of input, which keeps the opcode loop free of extra work.
    constexpr size_t kPublish = 256 * 1024;
    std::optional<Prefaulter> prefaulter;
    if (m_s.size() >= m_limits.prefaultFrom)
        prefaulter.emplace();
    auto publish = [&] {
        prefaulter->publish(
            {A.m_nodes.data(), A.m_nodes.size() * sizeof(Node),
             A.m_nodes.capacity() * sizeof(Node)},
            {A.m_pool.data(), A.m_pool.size() * sizeof(NodeId),
             A.m_pool.capacity() * sizeof(NodeId)},
            {m_memo.data(), m_memo.size() * sizeof(NodeId), m_memo.capacity() * sizeof(NodeId)},
            {A.m_recordFields.data(), A.m_recordFields.size() * sizeof(NodeId),
             A.m_recordFields.capacity() * sizeof(NodeId)});
    };
    size_t limit = prefaulter ? std::min(m_s.size(), kPublish) : m_s.size();
    if (prefaulter)
        publish();
    while (!m_done) {
        if (m_p >= limit) [[unlikely]] {
            if (m_p >= m_s.size()) {
                m_op = m_p;
                fail("truncated: stream ends before STOP");
                return *m_error;
            }
            publish();
            limit = std::min(m_s.size(), m_p + kPublish);
        }
        m_op = m_p;
        if (!step(m_s[m_p++]))
            return *m_error;
    }
    return Ok{};
}

Result<PickleArena> parsePickle(std::span<const uint8_t> stream, uint64_t baseOffset,
                                const PickleLimits &limits)
{
    PickleArena arena;
    PickleMachine vm(arena, stream, baseOffset, limits);
    auto st = vm.run();
    if (!st)
        return st.error();
    return arena;
}

} // namespace shardscope::detail
