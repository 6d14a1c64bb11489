// SPDX-License-Identifier: MIT
#include "read/picklemachine.h"
#include "read/prefaulter.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <unordered_map>

namespace shardscope::detail {

namespace pickleimpl {

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
            v = newInt(smallLong(m_s.data() + m_p, n));
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
        if (isDictClass(cls))
            return push(newContainer(NodeKind::Dict, m_stack.size()));
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

} // namespace pickleimpl

using namespace pickleimpl;

Result<PickleArena> parsePickle(std::span<const uint8_t> stream, uint64_t baseOffset,
                                const PickleLimits &limits)
{
    PickleArena arena;
    PickleMachine vm(arena, stream, baseOffset, limits);
    auto st = vm.run();
    if (!st)
        return st.error();
    if (limits.keepMemo)
        vm.spareMemo();
    return arena;
}

} // namespace shardscope::detail
