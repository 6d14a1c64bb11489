// SPDX-License-Identifier: MIT
// Reading a decoded pickle's values back: kinds, numbers, strings, items, records, and the
// conversion to a PyValue for display.
#include "read/picklemachine.h"

namespace shardscope::detail {

using namespace pickleimpl;

// Little-endian two's complement (LONG1/LONG4) to decimal text, by long division.
std::string pickleimpl::bigIntDecimal(std::string_view le)
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

} // namespace shardscope::detail
