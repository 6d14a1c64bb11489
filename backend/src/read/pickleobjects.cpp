// SPDX-License-Identifier: MIT
// Python's and torch's objects rebuilt without running anything: globals (refusing those that
// exist only to run code), the few REDUCE calls a checkpoint needs (OrderedDict, Counter,
// torch.Size, set, _codecs.encode, bytes), and DCP's per-chunk dataclasses folded into compact
// records.
#include "read/picklemachine.h"

namespace shardscope::detail::pickleimpl {

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
        if (mod == "collections" && (name == "OrderedDict" || name == "Counter")) {
            if (nargs == 0)
                return push(newContainer(NodeKind::Dict, m_stack.size()));
            // Python 2's OrderedDict.__reduce__ wrote a call on [key, value] pairs; Counter
            // pickles as a call on a dict. Anything else stays a call (and is named a problem
            // where it holds tensors).
            NodeId d = kNil;
            if (nargs == 1 && dictFrom(A.item(args, 0), name == "OrderedDict", d))
                return push(d);
        }
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

// dict(src) as OrderedDict and Counter build it: from a dict's pairs, or (OrderedDict only, as
// dict.update takes an iterable) from a list or tuple of two-item lists or tuples. False, and
// nothing made, for any other source.
bool PickleMachine::dictFrom(NodeId src, bool pairs, NodeId &result)
{
    const NodeKind k = A.kind(src);
    const size_t from = m_stack.size();
    if (k == NodeKind::Dict) {
        A.forEachItem(src, [&](NodeId v) { m_stack.push_back(v); });
    } else if (pairs && (k == NodeKind::List || k == NodeKind::Tuple)) {
        bool ok = true;
        A.forEachItem(src, [&](NodeId pair) {
            const NodeKind pk = A.kind(pair);
            if (!ok || (pk != NodeKind::List && pk != NodeKind::Tuple) || A.size(pair) != 2) {
                ok = false;
                return;
            }
            m_stack.push_back(A.item(pair, 0));
            m_stack.push_back(A.item(pair, 1));
        });
        if (!ok) {
            m_stack.resize(from);
            return false;
        }
    } else {
        return false;
    }
    result = newContainer(NodeKind::Dict, from);
    return true;
}

// torch.Size(dims) is the most common call in DCP metadata, and its one-item args tuple is
// garbage once reduced. Python never references an args tuple again, so when it is the
// newest node we take it back; its memo slot (if any) is poisoned so a hand-made pickle
// that does reference it fails cleanly instead of seeing a different value.
void PickleMachine::reclaimArgs(NodeId args)
{
    if (m_memoRewritten || !A.isNode(args) || A.nodeIndex(args) + 1 != A.m_nodes.size())
        return;
    const PickleArena::Node &n = A.m_nodes.back();
    if (!(n.flags & PickleArena::kSingle) || uint32_t(n.x) + uint32_t(n.x >> 32) != A.m_pool.size())
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
void PickleMachine::noteRecordCandidate(NodeId cls)
{
    if (m_memoRewritten)
        return;
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
        if (A.m_recordClass[kind] == kNil)
            A.m_recordClass[kind] = cls;
        else if (A.m_recordClass[kind] != cls)
            return; // a second class of that name: keep it generic, every time
        m_recordClassSeen[kind] = cls;
    }
    if (m_pending.size() >= 64) // objects that never got a BUILD; start over
        m_pending.clear();
    m_pending.push_back({uint32_t(A.m_nodes.size()), uint32_t(A.m_pool.size()),
                         uint32_t(A.m_segments.size()), uint32_t(kind), m_memo.size(),
                         m_stack.size()});
}

void PickleMachine::foldRecord(NodeId target, NodeId state)
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
    // The nodes the fold takes back must not be ones the machine keeps for later: a record
    // class made inside this object stays an object (its records would lose their class), and
    // the caches forget what goes.
    auto dropped = [&](NodeId v) { return A.isNode(v) && A.nodeIndex(v) >= p.node; };
    for (NodeId c : A.m_recordClass)
        if (dropped(c))
            return;
    for (NodeId *cache : {&m_sizeClass, &m_notSizeClass, &m_otherClassSeen, &m_notDictClass})
        if (dropped(*cache))
            *cache = kNil;
    for (auto &seen : m_fieldKeySeen)
        for (NodeId &k : seen)
            if (dropped(k))
                k = kNil;
    const NodeId record =
        (uint64_t(A.m_recordFields.size()) << 5) | (uint64_t(p.kind) << 3) | kTagRecord;
    noteEscapes(fields, fields + spec.fieldCount);
    if (m_firstRecord.field == UINT64_MAX)
        m_firstRecord = {A.m_recordFields.size(), p.memo};
    for (unsigned f = 0; f < spec.fieldCount; ++f) // two to four: no call to memcpy
        A.m_recordFields.push_back(fields[f]);
    if (m_limits.fastRecords) // the next ones can take the fast path
        m_fastClass[p.kind] = A.m_recordClass[p.kind];
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

} // namespace shardscope::detail::pickleimpl
