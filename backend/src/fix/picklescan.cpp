// SPDX-License-Identifier: MIT
#include "fix/picklescan.h"

#include <cstring>

namespace shardscope::detail {

namespace {

using Node = std::shared_ptr<PickleNode>;
using Kind = PickleNode::Kind;

Node make(Kind k)
{
    auto n = std::make_shared<PickleNode>();
    n->kind = k;
    return n;
}

class Walker
{
public:
    explicit Walker(std::string_view p)
        : m_p(p)
    {}

    Result<PickleScan> run()
    {
        PickleScan out;
        while (m_at < m_p.size()) {
            const size_t opAt = m_at;
            const uint8_t op = uint8_t(m_p[m_at++]);
            if (op == '.') {
                if (m_stack.size() != 1 || !m_marks.empty())
                    return fail(opAt, "STOP with " + std::to_string(m_stack.size()) +
                                          " values on the stack");
                out.root = m_stack.back();
                out.protocol = m_protocol;
                out.stop = opAt;
                return out;
            }
            if (Status st = step(op, opAt); !st)
                return st.error();
        }
        return fail(m_at, "no STOP");
    }

private:
    Error fail(size_t at, const std::string &why) const
    {
        return makeError(Error::Code::Format, "pickle: " + why).atOffset(at);
    }

    Result<std::string_view> take(size_t n)
    {
        if (n > m_p.size() - m_at)
            return fail(m_at, "an argument runs past the end");
        std::string_view v = m_p.substr(m_at, n);
        m_at += n;
        return v;
    }
    Result<uint64_t> le(size_t n)
    {
        auto b = take(n);
        if (!b)
            return b.error();
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i)
            v |= uint64_t(uint8_t((*b)[i])) << (8 * i);
        return v;
    }
    Result<std::string_view> line()
    {
        const size_t nl = m_p.find('\n', m_at);
        if (nl == std::string_view::npos)
            return fail(m_at, "a text argument without its newline");
        std::string_view v = m_p.substr(m_at, nl - m_at);
        m_at = nl + 1;
        return v;
    }
    // A length-prefixed argument: `n` bytes of length, then that many.
    Result<std::string_view> counted(size_t n)
    {
        auto len = le(n);
        if (!len)
            return len.error();
        return take(size_t(*len));
    }

    Result<Node> pop()
    {
        if (m_stack.empty() || (!m_marks.empty() && m_stack.size() <= m_marks.back()))
            return fail(m_at, "pops an empty stack");
        Node n = m_stack.back();
        m_stack.pop_back();
        return n;
    }
    Result<std::vector<Node>> popMark()
    {
        if (m_marks.empty())
            return fail(m_at, "no MARK");
        const size_t from = m_marks.back();
        m_marks.pop_back();
        std::vector<Node> items(m_stack.begin() + long(from), m_stack.end());
        m_stack.resize(from);
        return items;
    }
    void push(Node n) { m_stack.push_back(std::move(n)); }
    Status put(uint64_t slot)
    {
        if (m_stack.empty())
            return fail(m_at, "PUT on an empty stack");
        if (m_stack.back()->memo < 0)
            m_stack.back()->memo = int64_t(slot);
        m_memo[slot] = m_stack.back();
        return Ok{};
    }
    Status get(uint64_t slot)
    {
        auto it = m_memo.find(slot);
        if (it == m_memo.end())
            return fail(m_at, "GET of memo slot " + std::to_string(slot) + ", never PUT");
        push(it->second);
        return Ok{};
    }
    Node constant(Kind k, int64_t v, size_t opAt)
    {
        Node n = make(k);
        n->number = v;
        n->constant = std::string(m_p.substr(opAt, m_at - opAt));
        return n;
    }
    Node str(std::string_view s)
    {
        Node n = make(Kind::Str);
        n->text = std::string(s);
        return n;
    }
    Status setItems(const Node &dict, const std::vector<Node> &kv)
    {
        if (kv.size() % 2)
            return fail(m_at, "SETITEMS with an odd count");
        if (dict->kind == Kind::Dict || dict->kind == Kind::Reduce)
            dict->items.insert(dict->items.end(), kv.begin(), kv.end());
        return Ok{};
    }

    Status step(uint8_t op, size_t opAt)
    {
        switch (op) {
        case 0x80: { // PROTO
            auto v = le(1);
            if (!v)
                return v.error();
            m_protocol = uint32_t(*v);
            return Ok{};
        }
        case 0x95: // FRAME
            return le(8) ? Status(Ok{}) : Status(fail(opAt, "FRAME"));
        case '(':
            m_marks.push_back(m_stack.size());
            return Ok{};
        case '0':
            return pop() ? Status(Ok{}) : Status(fail(opAt, "POP"));
        case '1':
            return popMark() ? Status(Ok{}) : Status(fail(opAt, "POP_MARK"));
        case '2':
            if (m_stack.empty())
                return fail(opAt, "DUP on an empty stack");
            push(m_stack.back());
            return Ok{};
        case 'N':
            push(constant(Kind::None, 0, opAt));
            return Ok{};
        case 0x88:
        case 0x89:
            push(constant(Kind::Bool, op == 0x88, opAt));
            return Ok{};
        case 'K':
        case 'M':
        case 'J': {
            auto v = le(op == 'K' ? 1 : op == 'M' ? 2 : 4);
            if (!v)
                return v.error();
            push(constant(Kind::Int, op == 'J' ? int64_t(int32_t(uint32_t(*v))) : int64_t(*v),
                          opAt));
            return Ok{};
        }
        case 0x8a:
        case 0x8b: { // LONG1, LONG4
            auto v = counted(op == 0x8a ? 1 : 4);
            if (!v)
                return v.error();
            push(make(Kind::Opaque));
            return Ok{};
        }
        case 'I':
        case 'L':
        case 'F':
        case 'S':
        case 'V':
        case 'P': { // text-line values (protocol 0), PERSID
            auto v = line();
            if (!v)
                return v.error();
            push(op == 'V' ? str(*v) : make(op == 'P' ? Kind::Persid : Kind::Opaque));
            return Ok{};
        }
        case 'G': // BINFLOAT
            if (!take(8))
                return fail(opAt, "BINFLOAT");
            push(make(Kind::Opaque));
            return Ok{};
        case 'T':
        case 'B':
        case 'X':
        case 'U':
        case 'C':
        case 0x8c:
        case 0x8d:
        case 0x8e:
        case 0x96: {
            const size_t n = op == 'U' || op == 'C' || op == 0x8c     ? 1
                             : op == 0x8d || op == 0x8e || op == 0x96 ? 8
                                                                      : 4;
            auto v = counted(n);
            if (!v)
                return v.error();
            push(op == 'X' || op == 0x8c || op == 0x8d ? str(*v) : make(Kind::Opaque));
            return Ok{};
        }
        case ']':
        case 0x8f: // EMPTY_SET
            push(make(Kind::Opaque));
            return Ok{};
        case ')':
            push(make(Kind::Tuple));
            return Ok{};
        case '}':
            push(make(Kind::Dict));
            return Ok{};
        case 'a': { // APPEND
            auto v = pop();
            if (!v)
                return v.error();
            return m_stack.empty() ? Status(fail(opAt, "APPEND")) : Status(Ok{});
        }
        case 'e':
        case 0x90: { // APPENDS, ADDITEMS
            auto v = popMark();
            if (!v)
                return v.error();
            return m_stack.empty() ? Status(fail(opAt, "APPENDS")) : Status(Ok{});
        }
        case 'l':
        case 0x91: { // LIST, FROZENSET
            auto v = popMark();
            if (!v)
                return v.error();
            push(make(Kind::Opaque));
            return Ok{};
        }
        case 't':
        case 'd': { // TUPLE, DICT
            auto v = popMark();
            if (!v)
                return v.error();
            Node n = make(op == 't' ? Kind::Tuple : Kind::Dict);
            n->items = std::move(*v);
            push(std::move(n));
            return Ok{};
        }
        case 0x85:
        case 0x86:
        case 0x87: { // TUPLE1-3
            Node n = make(Kind::Tuple);
            n->items.resize(size_t(op - 0x84));
            for (size_t i = n->items.size(); i-- > 0;) {
                auto v = pop();
                if (!v)
                    return v.error();
                n->items[i] = std::move(*v);
            }
            push(std::move(n));
            return Ok{};
        }
        case 's': { // SETITEM
            auto v = pop();
            if (!v)
                return v.error();
            auto k = pop();
            if (!k)
                return k.error();
            if (m_stack.empty())
                return fail(opAt, "SETITEM without a dict");
            return setItems(m_stack.back(), {*k, *v});
        }
        case 'u': { // SETITEMS
            auto kv = popMark();
            if (!kv)
                return kv.error();
            if (m_stack.empty())
                return fail(opAt, "SETITEMS without a dict");
            return setItems(m_stack.back(), *kv);
        }
        case 'c': { // GLOBAL
            auto module = line();
            if (!module)
                return module.error();
            auto name = line();
            if (!name)
                return name.error();
            Node n = make(Kind::Global);
            n->text = std::string(*module) + "." + std::string(*name);
            push(std::move(n));
            return Ok{};
        }
        case 0x93: { // STACK_GLOBAL
            auto name = pop();
            if (!name)
                return name.error();
            auto module = pop();
            if (!module)
                return module.error();
            Node n = make(Kind::Global);
            n->text = (*module)->text + "." + (*name)->text;
            push(std::move(n));
            return Ok{};
        }
        case 'R':
        case 0x81: { // REDUCE, NEWOBJ
            auto args = pop();
            if (!args)
                return args.error();
            auto fn = pop();
            if (!fn)
                return fn.error();
            Node n = make(Kind::Reduce);
            n->callable = std::move(*fn);
            n->args = std::move(*args);
            push(std::move(n));
            return Ok{};
        }
        case 0x92: { // NEWOBJ_EX
            for (int i = 0; i < 3; ++i)
                if (!pop())
                    return fail(opAt, "NEWOBJ_EX");
            push(make(Kind::Opaque));
            return Ok{};
        }
        case 'b': { // BUILD
            auto state = pop();
            if (!state)
                return state.error();
            if (m_stack.empty())
                return fail(opAt, "BUILD without an object");
            m_stack.back()->state = std::move(*state);
            return Ok{};
        }
        case 'i': { // INST
            if (!line() || !line())
                return fail(opAt, "INST");
            if (!popMark())
                return fail(opAt, "INST");
            push(make(Kind::Opaque));
            return Ok{};
        }
        case 'o': // OBJ
            if (!popMark())
                return fail(opAt, "OBJ");
            push(make(Kind::Opaque));
            return Ok{};
        case 0x82:
        case 0x83:
        case 0x84: // EXT1, EXT2, EXT4
            if (!take(op == 0x82 ? 1 : op == 0x83 ? 2 : 4))
                return fail(opAt, "EXT");
            push(make(Kind::Opaque));
            return Ok{};
        case 'Q': { // BINPERSID
            auto id = pop();
            if (!id)
                return id.error();
            Node n = make(Kind::Persid);
            n->args = std::move(*id);
            push(std::move(n));
            return Ok{};
        }
        case 'p': { // PUT
            auto v = line();
            if (!v)
                return v.error();
            return put(std::strtoull(std::string(*v).c_str(), nullptr, 10));
        }
        case 'q':
        case 'r': {
            auto v = le(op == 'q' ? 1 : 4);
            if (!v)
                return v.error();
            return put(*v);
        }
        case 0x94: // MEMOIZE
            return put(m_memo.size());
        case 'g': {
            auto v = line();
            if (!v)
                return v.error();
            return get(std::strtoull(std::string(*v).c_str(), nullptr, 10));
        }
        case 'h':
        case 'j': {
            auto v = le(op == 'h' ? 1 : 4);
            if (!v)
                return v.error();
            return get(*v);
        }
        case 0x97: // NEXT_BUFFER
            push(make(Kind::Opaque));
            return Ok{};
        case 0x98: // READONLY_BUFFER
            return Ok{};
        default:
            return fail(
                opAt, "unknown opcode 0x" + [op] {
                    char b[3];
                    std::snprintf(b, sizeof b, "%02x", op);
                    return std::string(b);
                }());
        }
    }

    std::string_view m_p;
    size_t m_at = 0;
    uint32_t m_protocol = 0;
    std::vector<Node> m_stack;
    std::vector<size_t> m_marks;
    std::map<uint64_t, Node> m_memo;
};

} // namespace

Result<PickleScan> scanPickle(std::string_view pickle)
{
    return Walker(pickle).run();
}

const PickleNode *dictValue(const PickleNode &dict, std::string_view key)
{
    for (size_t i = 0; i + 1 < dict.items.size(); i += 2)
        if (dict.items[i]->kind == PickleNode::Kind::Str && dict.items[i]->text == key)
            return dict.items[i + 1].get();
    return nullptr;
}

} // namespace shardscope::detail
