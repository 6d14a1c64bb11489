// SPDX-License-Identifier: MIT
// DCP's per-chunk dataclasses read straight into records. A big .metadata is millions of
// ChunkStorageMetadata, MetadataIndex and _StorageInfo objects pickled the same way:
//
//   <class> ) NEWOBJ MEMOIZE } MEMOIZE ( <key> <value> … SETITEMS BUILD
//
// Run as opcodes, each makes an object, a dict and its items in the arena, which foldRecord
// then turns into a record and takes back. Here the same bytes go straight to the record, and
// the memo ends up exactly as the opcodes would leave it (the object's slot holds the record,
// the dict's is reclaimed, the values' hold the values). Anything else (another value form, a
// FRAME in between, a key out of order, bytes running out) leaves everything as it was and
// returns false: the opcodes then decode it, errors included.
#include "read/picklemachine.h"

namespace shardscope::detail::pickleimpl {

namespace {
// Stands in the memo for the object until it is a record: a node no arena has, so that a
// reference to it inside its own state is refused like any other unusable value.
constexpr NodeId kObjectSlot = NodeId(UINT32_MAX) << 3;
} // namespace

bool PickleMachine::readMemoRef(NodeId &out)
{
    uint64_t idx;
    if (m_s[m_p] == 'h' && m_s.size() - m_p >= 2) {
        idx = m_s[m_p + 1];
        m_p += 2;
    } else if (m_s[m_p] == 'j' && m_s.size() - m_p >= 5) {
        uint32_t i;
        std::memcpy(&i, m_s.data() + m_p + 1, 4);
        idx = i;
        m_p += 5;
    } else {
        return false;
    }
    if (idx >= m_memo.size())
        return false;
    out = m_memo[idx];
    return out != kNil && out != kReclaimed;
}

bool PickleMachine::readStr(NodeId &out)
{
    const uint8_t op = m_s[m_p];
    size_t head;
    uint64_t n;
    if (op == 0x8c && m_s.size() - m_p >= 2) {
        head = 2;
        n = m_s[m_p + 1];
    } else if (op == 'X' && m_s.size() - m_p >= 5) {
        uint32_t n4;
        std::memcpy(&n4, m_s.data() + m_p + 1, 4);
        head = 5;
        n = n4;
    } else {
        return false;
    }
    const uint64_t at = m_p + head;
    if (n > m_s.size() - at || n > kInlineStrMaxLen || at > kInlineStrMaxOffset)
        return false;
    out = inlineStr(kTagStr, at, n);
    m_p = at + n;
    optionalMemo(out);
    return true;
}

bool PickleMachine::readKey(NodeId &out)
{
    if (m_s[m_p] == 'h' || m_s[m_p] == 'j')
        return readMemoRef(out) && tag(out) == kTagStr;
    return readStr(out);
}

// Up to three ints (BININT1, BININT2, BININT, LONG1 of at most 8 bytes that fits in a word).
bool PickleMachine::readInts(NodeId *ints, size_t &n)
{
    n = 0;
    while (n < 3 && m_p < m_s.size()) {
        const uint8_t op = m_s[m_p];
        const size_t left = m_s.size() - m_p - 1;
        int64_t v;
        if (op == 'K' && left >= 1) {
            v = m_s[m_p + 1];
            m_p += 2;
        } else if (op == 'M' && left >= 2) {
            uint16_t u;
            std::memcpy(&u, m_s.data() + m_p + 1, 2);
            v = u;
            m_p += 3;
        } else if (op == 'J' && left >= 4) {
            int32_t i;
            std::memcpy(&i, m_s.data() + m_p + 1, 4);
            v = i;
            m_p += 5;
        } else if (op == 0x8a && left >= 1 && m_s[m_p + 1] <= 8 && m_s[m_p + 1] <= left - 1) {
            const unsigned len = m_s[m_p + 1];
            v = smallLong(m_s.data() + m_p + 2, len);
            if (v < kInlineIntMin || v > kInlineIntMax)
                return false; // an Int node, as newInt makes
            m_p += 2 + len;
        } else {
            break;
        }
        ints[n++] = inlineInt(v);
    }
    return true;
}

// A tuple of up to three ints as newTuple packs it, or the empty tuple; then its memo slot.
bool PickleMachine::readTuple(NodeId &out)
{
    if (m_p >= m_s.size())
        return false;
    if (m_s[m_p] == ')') {
        ++m_p;
        out = kEmptyTuple;
    } else {
        const bool marked = m_s[m_p] == '(';
        m_p += marked;
        NodeId ints[3];
        size_t n = 0;
        if (!readInts(ints, n) || m_p >= m_s.size())
            return false;
        const uint8_t op = m_s[m_p++];
        if (marked ? op != 't' : n == 0 || op != 0x84 + n) // (0x84 is no TUPLE0)
            return false;
        if (n == 0)
            out = kEmptyTuple; // MARK TUPLE
        else if (!packInts(ints, n, out))
            return false;
    }
    optionalMemo(out);
    return true;
}

bool PickleMachine::readValue(NodeId &out)
{
    const uint8_t op = m_s[m_p];
    switch (op) {
    case 'N':
    case 0x88:
    case 0x89:
        out = op == 'N' ? kNone : op == 0x88 ? kTrue : kFalse;
        ++m_p;
        optionalMemo(out);
        return true;
    case 0x8c:
    case 'X':
        return readStr(out);
    case ')':
    case '(':
        return readTuple(out);
    case 'K':
    case 'M':
    case 'J':
    case 0x8a: {
        NodeId ints[3];
        size_t n = 0;
        if (!readInts(ints, n) || n == 0 || m_p >= m_s.size())
            return false;
        if (n == 1 && m_s[m_p] != 0x85) { // a lone int
            out = ints[0];
            optionalMemo(out);
            return true;
        }
        if (m_s[m_p] != 0x84 + n || !packInts(ints, n, out))
            return false;
        ++m_p;
        optionalMemo(out);
        return true;
    }
    case 'h':
    case 'j': {
        NodeId v;
        if (!readMemoRef(v))
            return false;
        if (PickleArena::isSelfContained(v)) {
            out = v;
            optionalMemo(out);
            return true;
        }
        // torch.Size(dims): the class, the dims, a one-item args tuple, REDUCE. doReduce
        // takes the args tuple back and poisons its memo slot; the dims are the value.
        if (v != m_sizeClass) {
            // (kObjectSlot, this object's own slot, is a node no arena has)
            if (v == m_notSizeClass || v == kObjectSlot || !A.isNode(v) ||
                A.kind(v) != NodeKind::Global || A.globalModule(v) != "torch" ||
                A.globalName(v) != "Size") {
                m_notSizeClass = v;
                return false;
            }
            m_sizeClass = v;
        }
        if (!readTuple(out) || m_s.size() - m_p < 1 || m_s[m_p] != 0x85)
            return false;
        ++m_p;
        optionalMemo(kReclaimed);
        if (m_p >= m_s.size() || m_s[m_p] != 'R')
            return false;
        ++m_p;
        optionalMemo(out);
        return true;
    }
    default:
        return false; // a node (list, object, big int…): the opcodes' business
    }
}

bool PickleMachine::readRecord(unsigned kind)
{
    const uint64_t start = m_p;
    const size_t memo0 = m_memo.size();
    auto undo = [&] {
        m_p = start;
        m_memo.resize(memo0);
        return false;
    };
    // As foldRecord: no records while objects carry extra state or after the memo was
    // rewritten; and never deeper (stack, MARKs) than the opcodes would be allowed to go.
    if (!A.m_objExtra.empty() || m_memoRewritten || m_stack.size() + 16 >= m_limits.maxStack ||
        m_marks.size() + 2 > m_limits.maxMarks)
        return false;
    if (m_s.size() - m_p < 8 || m_s[m_p] != ')' || m_s[m_p + 1] != 0x81)
        return false;
    m_p += 2;
    optionalMemo(kObjectSlot);
    if (m_s[m_p] != '}')
        return undo();
    ++m_p;
    optionalMemo(kReclaimed); // the state dict: foldRecord reclaims its slot
    if (m_p >= m_s.size() || m_s[m_p] != '(')
        return undo();
    ++m_p;
    const RecordSpec &spec = kRecordSpecs[kind];
    NodeId fields[4] = {kNil, kNil, kNil, kNil};
    NodeId *seen = m_fieldKeySeen[kind];
    int last = -1;
    for (;;) {
        if (m_p >= m_s.size())
            return undo();
        if (m_s[m_p] == 'u')
            break;
        NodeId k, v;
        if (!readKey(k) || m_p >= m_s.size())
            return undo();
        unsigned i = 0;
        while (i < spec.fieldCount && k != seen[i])
            ++i;
        if (i == spec.fieldCount) {
            const std::string_view key = PickleArena::wordBytes(m_s, k);
            i = 0;
            while (i < spec.fieldCount && key != spec.fields[i])
                ++i;
            if (i == spec.fieldCount)
                return undo();
            seen[i] = k;
        }
        if (int(i) <= last || !readValue(v) || m_p >= m_s.size())
            return undo();
        fields[i] = v;
        last = int(i);
    }
    if (last < 0 || m_s.size() - m_p < 2 || m_s[m_p + 1] != 'b')
        return undo();
    m_p += 2;

    // What foldRecord does once the opcodes have run.
    if (m_pending.size() >= 64) // noteRecordCandidate's rule, as if it had run
        m_pending.clear();
    const NodeId record =
        (uint64_t(A.m_recordFields.size()) << 5) | (uint64_t(kind) << 3) | kTagRecord;
    if (m_firstRecord.field == UINT64_MAX)
        m_firstRecord = {A.m_recordFields.size(), memo0};
    for (unsigned f = 0; f < spec.fieldCount; ++f) // two to four: no call to memcpy
        A.m_recordFields.push_back(fields[f]);
    for (size_t i = memo0; i < m_memo.size(); ++i)
        if (m_memo[i] == kObjectSlot)
            m_memo[i] = record;
    m_stack.back() = record;
    ++A.m_fastRecords;
    return true;
}

} // namespace shardscope::detail::pickleimpl
