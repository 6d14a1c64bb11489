// SPDX-License-Identifier: MIT
#include "pickle.h"

#include <algorithm>
#include <array>
#include <cstring>
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

std::string_view PickleArena::bytes(NodeId n) const
{
    const Node &node = m_nodes[n];
    if (node.owned)
        return std::string_view(m_owned).substr(node.u, node.a);
    return {reinterpret_cast<const char *>(m_stream.data()) + node.u, node.a};
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
    if (kind(n) != NodeKind::Tuple && kind(n) != NodeKind::List)
        return kNil;
    for (uint32_t s = m_nodes[n].a; s != kNil; s = m_segments[s].next) {
        if (i < m_segments[s].count)
            return m_pool[m_segments[s].start + i];
        i -= m_segments[s].count;
    }
    return kNil;
}

NodeId PickleArena::get(NodeId n, std::string_view key) const
{
    if (n == kNil)
        return kNil;
    if (kind(n) == NodeKind::Object)
        n = objState(n);
    if (n == kNil || kind(n) != NodeKind::Dict)
        return kNil;
    NodeId found = kNil;
    for (uint32_t s = m_nodes[n].a; s != kNil && found == kNil; s = m_segments[s].next) {
        const Segment &seg = m_segments[s];
        for (uint32_t i = 0; i + 1 < seg.count; i += 2) {
            NodeId k = m_pool[seg.start + i];
            if (kind(k) == NodeKind::Str && bytes(k) == key) {
                found = m_pool[seg.start + i + 1];
                break;
            }
        }
    }
    return found;
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

Result<std::vector<int64_t>> PickleArena::intTuple(NodeId n) const
{
    if (n == kNil || (kind(n) != NodeKind::Tuple && kind(n) != NodeKind::List))
        return makeError(Error::Code::Format, "expected a tuple of ints")
            .atOffset(n == kNil ? m_base : offsetOf(n));
    std::vector<int64_t> out;
    out.reserve(size(n));
    bool bad = false;
    forEachItem(n, [&](NodeId v) {
        if (kind(v) == NodeKind::Int)
            out.push_back(integer(v));
        else
            bad = true;
    });
    if (bad)
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
        v.items.push_back(toPyValueImpl(objState(n), depth - 1, stack, budget));
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
// small multiple of the input size or overflow the C++ stack.
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
        A.m_nodes.reserve(std::min<size_t>(s.size() / 4 + 16, size_t(1) << 26));
        A.m_pool.reserve(std::min<size_t>(s.size() / 8 + 16, size_t(1) << 26));
    }

    Status run();

private:
    using Node = PickleArena::Node;

    Error fail(std::string msg, Error::Code code = Error::Code::Format) const
    {
        return makeError(code, "pickle: " + std::move(msg)).atOffset(A.m_base + m_op);
    }
    bool need(uint64_t n) const { return n <= m_s.size() - m_p; }
    template<typename T>
    T readLE()
    {
        T v{};
        std::memcpy(&v, m_s.data() + m_p, sizeof(T));
        m_p += sizeof(T);
        return v;
    }
    NodeId newNode(NodeKind k)
    {
        Node n;
        n.kind = k;
        n.pos = saturate32(m_op);
        A.m_nodes.push_back(n);
        return NodeId(A.m_nodes.size() - 1);
    }
    NodeId newStr(NodeKind k, uint64_t offset, uint64_t len)
    {
        NodeId id = newNode(k);
        A.m_nodes[id].u = offset;
        A.m_nodes[id].a = uint32_t(len);
        return id;
    }
    NodeId newContainer(NodeKind k, size_t from)
    {
        NodeId id = newNode(k);
        appendItems(id, from);
        return id;
    }
    // Moves stack[from..] into the container's item list.
    void appendItems(NodeId c, size_t from)
    {
        const size_t count = m_stack.size() - from;
        if (count == 0)
            return;
        Node &node = A.m_nodes[c];
        const uint32_t poolEnd = uint32_t(A.m_pool.size());
        if (node.b != kNil) {
            auto &last = A.m_segments[node.b];
            if (last.start + last.count == poolEnd) { // extend in place: APPEND in a loop
                A.m_pool.insert(A.m_pool.end(), m_stack.begin() + long(from), m_stack.end());
                last.count += uint32_t(count);
                node.u += k(c) == NodeKind::Dict ? count / 2 : count;
                m_stack.resize(from);
                return;
            }
        }
        A.m_pool.insert(A.m_pool.end(), m_stack.begin() + long(from), m_stack.end());
        A.m_segments.push_back({poolEnd, uint32_t(count), kNil});
        const uint32_t seg = uint32_t(A.m_segments.size() - 1);
        if (node.b == kNil)
            node.a = seg;
        else
            A.m_segments[node.b].next = seg;
        node.b = seg;
        node.u += k(c) == NodeKind::Dict ? count / 2 : count;
        m_stack.resize(from);
    }
    NodeKind k(NodeId n) const { return A.m_nodes[n].kind; }

    Result<size_t> popMark()
    {
        if (m_marks.empty())
            return fail("MARK expected but the mark stack is empty");
        size_t m = m_marks.back();
        m_marks.pop_back();
        return m;
    }
    Result<NodeId> pop()
    {
        if (m_stack.size() <= (m_marks.empty() ? 0 : m_marks.back()))
            return fail("stack underflow");
        NodeId v = m_stack.back();
        m_stack.pop_back();
        return v;
    }
    Status push(NodeId n)
    {
        if (m_stack.size() >= m_limits.maxStack)
            return fail("stack deeper than " + std::to_string(m_limits.maxStack),
                        Error::Code::Limit);
        m_stack.push_back(n);
        return Ok{};
    }
    Status memoPut(uint64_t idx)
    {
        if (m_stack.empty())
            return fail("memo store with an empty stack");
        if (idx >= m_limits.maxMemo)
            return fail("memo index " + std::to_string(idx) + " out of bounds", Error::Code::Limit);
        NodeId v = m_stack.back();
        if (idx < m_memo.size()) {
            m_memo[idx] = v;
        } else if (idx < m_memo.size() + 4096) {
            m_memo.resize(idx + 1, kNil);
            m_memo[idx] = v;
        } else {
            m_sparseMemo[idx] = v;
        }
        return Ok{};
    }
    Status memoGet(uint64_t idx)
    {
        NodeId v = kNil;
        if (idx < m_memo.size()) {
            v = m_memo[idx];
        } else if (auto it = m_sparseMemo.find(idx); it != m_sparseMemo.end()) {
            v = it->second;
        }
        if (v == kNil)
            return fail("memo key " + std::to_string(idx) + " was never stored");
        return push(v);
    }
    Status addTo(NodeId target, size_t from, bool pairs);
    Status doReduce(NodeId callable, NodeId args);
    Status makeGlobal(NodeId module, NodeId name);
    Result<NodeId> bytesFromLatin1(NodeId text);

    PickleArena &A;
    std::span<const uint8_t> m_s;
    PickleLimits m_limits;
    uint64_t m_p = 0;
    uint64_t m_op = 0;
    std::vector<NodeId> m_stack;
    std::vector<size_t> m_marks;
    std::vector<NodeId> m_memo;
    std::unordered_map<uint64_t, NodeId> m_sparseMemo;
};

Status PickleMachine::addTo(NodeId target, size_t from, bool pairs)
{
    if ((m_stack.size() - from) % 2 != 0 && pairs)
        return fail("odd number of items for a dict");
    NodeKind tk = k(target);
    if (tk == NodeKind::Object) {
        // A dict or list subclass built by NEWOBJ: keep its items beside its state.
        NodeId extra = A.objExtra(target);
        if (extra == kNil) {
            extra = newNode(pairs ? NodeKind::Dict : NodeKind::List);
            A.m_nodes[target].u = (A.m_nodes[target].u & 0xffffffffu) | (uint64_t(extra) << 32);
        }
        target = extra;
        tk = k(target);
    }
    const bool ok = pairs ? tk == NodeKind::Dict : (tk == NodeKind::List || tk == NodeKind::Set);
    if (!ok)
        return fail(std::string(pairs ? "SETITEM(S)" : "APPEND(S)/ADDITEMS") +
                    " on a value that is not a " + (pairs ? "dict" : "list or set"));
    appendItems(target, from);
    return Ok{};
}

Status PickleMachine::makeGlobal(NodeId module, NodeId name)
{
    if (k(module) != NodeKind::Str || k(name) != NodeKind::Str)
        return fail("global reference with non-string module or name");
    if (isForbiddenGlobal(A.bytes(module), A.bytes(name)))
        return fail("refusing global '" + std::string(A.bytes(module)) + "." +
                        std::string(A.bytes(name)) + "': it exists only to run code",
                    Error::Code::Unsafe);
    NodeId g = newNode(NodeKind::Global);
    A.m_nodes[g].a = module;
    A.m_nodes[g].b = name;
    return push(g);
}

// Protocol 2 cannot encode bytes directly, so Python writes _codecs.encode(latin1_text, 'latin1').
Result<NodeId> PickleMachine::bytesFromLatin1(NodeId text)
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
    NodeId id = newNode(NodeKind::Bytes);
    A.m_nodes[id].owned = 1;
    A.m_nodes[id].u = A.m_owned.size();
    A.m_nodes[id].a = uint32_t(out.size());
    A.m_owned += out;
    return id;
}

Status PickleMachine::doReduce(NodeId callable, NodeId args)
{
    if (k(callable) == NodeKind::Global) {
        std::string_view mod = A.globalModule(callable), name = A.globalName(callable);
        const uint64_t nargs = k(args) == NodeKind::Tuple ? A.size(args) : UINT64_MAX;
        if (mod == "collections" && name == "OrderedDict" && nargs == 0)
            return push(newNode(NodeKind::Dict));
        if (mod == "torch" && name == "Size" && nargs == 1) {
            NodeId dims = A.item(args, 0);
            if (k(dims) == NodeKind::Tuple || k(dims) == NodeKind::List)
                return push(dims);
        }
        if ((mod == "builtins" || mod == "__builtin__") && (name == "set" || name == "frozenset")) {
            NodeId s = newNode(name == "set" ? NodeKind::Set : NodeKind::FrozenSet);
            if (nargs == 1) {
                NodeId src = A.item(args, 0);
                if (k(src) == NodeKind::List || k(src) == NodeKind::Tuple) {
                    size_t from = m_stack.size();
                    for (NodeId v : A.items(src))
                        m_stack.push_back(v);
                    appendItems(s, from);
                }
            }
            return push(s);
        }
        if (((mod == "_codecs" && name == "encode") ||
             ((mod == "builtins" || mod == "__builtin__") && name == "bytearray")) &&
            nargs == 2 && k(A.item(args, 0)) == NodeKind::Str) {
            auto b = bytesFromLatin1(A.item(args, 0));
            if (!b)
                return b.error();
            return push(*b);
        }
        if ((mod == "builtins" || mod == "__builtin__") && name == "bytes" && nargs == 0) {
            NodeId id = newStr(NodeKind::Bytes, 0, 0);
            return push(id);
        }
    }
    NodeId o = newNode(NodeKind::Object);
    A.m_nodes[o].a = callable;
    A.m_nodes[o].b = args;
    A.m_nodes[o].u = uint64_t(kNil) | (uint64_t(kNil) << 32);
    return push(o);
}

#define SS_TRY(expr)                                                                               \
    do {                                                                                           \
        auto _st = (expr);                                                                         \
        if (!_st)                                                                                  \
            return _st.error();                                                                    \
    } while (0)

#define SS_POP(var)                                                                                \
    NodeId var;                                                                                    \
    {                                                                                              \
        auto _r = pop();                                                                           \
        if (!_r)                                                                                   \
            return _r.error();                                                                     \
        var = *_r;                                                                                 \
    }

#define SS_NEED(n)                                                                                 \
    do {                                                                                           \
        if (!need(n))                                                                              \
            return fail("truncated: opcode needs " + std::to_string(uint64_t(n)) +                 \
                        " more bytes than remain");                                                \
    } while (0)

Status PickleMachine::run()
{
    while (true) {
        if (m_p >= m_s.size())
            return fail("truncated: stream ends before STOP");
        m_op = m_p;
        const uint8_t op = m_s[m_p++];
        switch (op) {
        case 0x80: // PROTO
            SS_NEED(1);
            if (m_s[m_p] > 5)
                return fail("unsupported pickle protocol " + std::to_string(m_s[m_p]),
                            Error::Code::Unsupported);
            ++m_p;
            break;
        case 0x95: // FRAME: a length hint only
            SS_NEED(8);
            m_p += 8;
            break;
        case '.': { // STOP
            SS_POP(v);
            A.m_root = v;
            return Ok{};
        }
        case '(':
            if (m_marks.size() >= m_limits.maxMarks)
                return fail("too many nested MARKs", Error::Code::Limit);
            m_marks.push_back(m_stack.size());
            break;
        case '0': { // POP
            if (!m_marks.empty() && m_marks.back() == m_stack.size()) {
                m_marks.pop_back();
            } else {
                SS_POP(v);
                (void)v;
            }
            break;
        }
        case '1': { // POP_MARK
            auto m = popMark();
            if (!m)
                return m.error();
            m_stack.resize(*m);
            break;
        }
        case '2': // DUP
            if (m_stack.empty())
                return fail("DUP on an empty stack");
            SS_TRY(push(m_stack.back()));
            break;
        case 'N':
            SS_TRY(push(newNode(NodeKind::None)));
            break;
        case 0x88:
        case 0x89: {
            NodeId id = newNode(NodeKind::Bool);
            A.m_nodes[id].i = op == 0x88;
            SS_TRY(push(id));
            break;
        }
        case 'J': { // BININT
            SS_NEED(4);
            NodeId id = newNode(NodeKind::Int);
            A.m_nodes[id].i = readLE<int32_t>();
            SS_TRY(push(id));
            break;
        }
        case 'K': {
            SS_NEED(1);
            NodeId id = newNode(NodeKind::Int);
            A.m_nodes[id].i = readLE<uint8_t>();
            SS_TRY(push(id));
            break;
        }
        case 'M': {
            SS_NEED(2);
            NodeId id = newNode(NodeKind::Int);
            A.m_nodes[id].i = readLE<uint16_t>();
            SS_TRY(push(id));
            break;
        }
        case 0x8a:   // LONG1
        case 0x8b: { // LONG4
            uint64_t n;
            if (op == 0x8a) {
                SS_NEED(1);
                n = readLE<uint8_t>();
            } else {
                SS_NEED(4);
                int32_t n4 = readLE<int32_t>();
                if (n4 < 0)
                    return fail("LONG4 with negative length");
                n = uint64_t(n4);
            }
            SS_NEED(n);
            if (n <= 8) {
                uint64_t u = 0;
                for (uint64_t i = 0; i < n; ++i)
                    u |= uint64_t(m_s[m_p + i]) << (8 * i);
                if (n > 0 && n < 8 && (m_s[m_p + n - 1] & 0x80))
                    u |= ~uint64_t(0) << (8 * n); // sign-extend
                NodeId id = newNode(NodeKind::Int);
                A.m_nodes[id].u = u;
                SS_TRY(push(id));
            } else {
                SS_TRY(push(newStr(NodeKind::BigInt, m_p, n)));
            }
            m_p += n;
            break;
        }
        case 'G': { // BINFLOAT, big-endian
            SS_NEED(8);
            uint64_t be = 0;
            for (int i = 0; i < 8; ++i)
                be = (be << 8) | m_s[m_p + i];
            m_p += 8;
            NodeId id = newNode(NodeKind::Float);
            std::memcpy(&A.m_nodes[id].f, &be, 8);
            SS_TRY(push(id));
            break;
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
                SS_NEED(1);
                n = readLE<uint8_t>();
            } else if (op == 'X' || op == 'T' || op == 'B') {
                SS_NEED(4);
                n = readLE<uint32_t>();
            } else {
                SS_NEED(8);
                n = readLE<uint64_t>();
            }
            SS_NEED(n);
            if (n > UINT32_MAX)
                return fail("string of " + std::to_string(n) + " bytes", Error::Code::Limit);
            const bool text = op == 'X' || op == 0x8c || op == 0x8d || op == 'T' || op == 'U';
            SS_TRY(push(newStr(text ? NodeKind::Str : NodeKind::Bytes, m_p, n)));
            m_p += n;
            break;
        }
        case ')':
            SS_TRY(push(newNode(NodeKind::Tuple)));
            break;
        case ']':
            SS_TRY(push(newNode(NodeKind::List)));
            break;
        case '}':
            SS_TRY(push(newNode(NodeKind::Dict)));
            break;
        case 0x8f:
            SS_TRY(push(newNode(NodeKind::Set)));
            break;
        case 0x85:
        case 0x86:
        case 0x87: { // TUPLE1..3
            const size_t n = size_t(op - 0x84);
            const size_t floor = m_marks.empty() ? 0 : m_marks.back();
            if (m_stack.size() < floor + n)
                return fail("stack underflow");
            NodeId t = newContainer(NodeKind::Tuple, m_stack.size() - n);
            SS_TRY(push(t));
            break;
        }
        case 't':
        case 'l':
        case 'd':
        case 0x91: { // TUPLE, LIST, DICT, FROZENSET (from MARK)
            auto m = popMark();
            if (!m)
                return m.error();
            const NodeKind nk = op == 't'   ? NodeKind::Tuple
                                : op == 'l' ? NodeKind::List
                                : op == 'd' ? NodeKind::Dict
                                            : NodeKind::FrozenSet;
            if (nk == NodeKind::Dict && (m_stack.size() - *m) % 2)
                return fail("odd number of items for DICT");
            NodeId c = newContainer(nk, *m);
            SS_TRY(push(c));
            break;
        }
        case 'a': { // APPEND
            SS_POP(v);
            if (m_stack.size() <= (m_marks.empty() ? 0 : m_marks.back()))
                return fail("APPEND without a list");
            NodeId target = m_stack.back();
            m_stack.push_back(v);
            SS_TRY(addTo(target, m_stack.size() - 1, false));
            break;
        }
        case 's': { // SETITEM
            if (m_stack.size() < 3 + (m_marks.empty() ? 0 : m_marks.back()))
                return fail("SETITEM without a dict");
            NodeId target = m_stack[m_stack.size() - 3];
            SS_TRY(addTo(target, m_stack.size() - 2, true));
            break;
        }
        case 'e':    // APPENDS
        case 'u':    // SETITEMS
        case 0x90: { // ADDITEMS
            auto m = popMark();
            if (!m)
                return m.error();
            if (*m == 0 || *m > m_stack.size())
                return fail("no container below MARK");
            NodeId target = m_stack[*m - 1];
            SS_TRY(addTo(target, *m, op == 'u'));
            break;
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
            SS_TRY(makeGlobal(parts[0], parts[1]));
            break;
        }
        case 0x93: { // STACK_GLOBAL
            SS_POP(name);
            SS_POP(module);
            SS_TRY(makeGlobal(module, name));
            break;
        }
        case 'R': { // REDUCE
            SS_POP(args);
            SS_POP(callable);
            SS_TRY(doReduce(callable, args));
            break;
        }
        case 0x81: { // NEWOBJ
            SS_POP(args);
            SS_POP(cls);
            NodeId o = newNode(NodeKind::Object);
            A.m_nodes[o].a = cls;
            A.m_nodes[o].b = args;
            A.m_nodes[o].u = uint64_t(kNil) | (uint64_t(kNil) << 32);
            SS_TRY(push(o));
            break;
        }
        case 0x92: { // NEWOBJ_EX
            SS_POP(kwargs);
            SS_POP(args);
            SS_POP(cls);
            NodeId o = newNode(NodeKind::Object);
            A.m_nodes[o].a = cls;
            A.m_nodes[o].b = args;
            A.m_nodes[o].u = uint64_t(kNil) | (uint64_t(kwargs) << 32);
            SS_TRY(push(o));
            break;
        }
        case 'b': { // BUILD
            SS_POP(state);
            if (m_stack.empty())
                return fail("BUILD without an object");
            NodeId target = m_stack.back();
            if (k(target) == NodeKind::Object)
                A.m_nodes[target].u = (A.m_nodes[target].u & ~uint64_t(0xffffffffu)) | state;
            break;
        }
        case 'Q': { // BINPERSID
            SS_POP(pid);
            NodeId id = newNode(NodeKind::PersId);
            A.m_nodes[id].a = pid;
            SS_TRY(push(id));
            break;
        }
        case 'q':
            SS_NEED(1);
            SS_TRY(memoPut(readLE<uint8_t>()));
            break;
        case 'r':
            SS_NEED(4);
            SS_TRY(memoPut(readLE<uint32_t>()));
            break;
        case 0x94: // MEMOIZE
            SS_TRY(memoPut(m_memo.size()));
            break;
        case 'h':
            SS_NEED(1);
            SS_TRY(memoGet(readLE<uint8_t>()));
            break;
        case 'j':
            SS_NEED(4);
            SS_TRY(memoGet(readLE<uint32_t>()));
            break;
        default: {
            static const char *hex = "0123456789abcdef";
            std::string name = "0x";
            name += hex[op >> 4];
            name += hex[op & 15];
            return fail("unsupported opcode " + name, Error::Code::Unsupported);
        }
        }
    }
}

#undef SS_TRY
#undef SS_POP
#undef SS_NEED

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
