// SPDX-License-Identifier: MIT
// The safe pickle decoder against hostile and malformed streams (hand-built: these are the
// inputs no well-behaved writer produces, so no tool can generate them for us).
#include "read/pickle.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include <string>

using namespace std::string_literals;

using namespace shardscope;
using namespace shardscope::detail;

namespace {

std::span<const uint8_t> bytesOf(const std::string &s)
{
    return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

std::string proto(int p)
{
    return std::string("\x80", 1) + char(p);
}

} // namespace

TEST(Pickle, RefusesOsSystemGlobal)
{
    const std::string s = proto(2) + "cos\nsystem\nX\x02\x00\x00\x00lsR."s;
    auto r = parsePickle(bytesOf(s), 100);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Error::Code::Unsafe);
    EXPECT_NE(r.error().message.find("os.system"), std::string::npos);
    ASSERT_TRUE(r.error().offset.has_value());
    EXPECT_EQ(*r.error().offset, 102u); // the GLOBAL opcode, in file coordinates
}

TEST(Pickle, RefusesBuiltinsEvalViaStackGlobal)
{
    const std::string s = proto(4) + "\x8c\x08" + "builtins" + "\x8c\x04" + "eval" + "\x93" + ".";
    auto r = parsePickle(bytesOf(s));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Error::Code::Unsafe);
    EXPECT_NE(r.error().toString().find("builtins.eval"), std::string::npos);
}

TEST(Pickle, UnknownClassesStayInert)
{
    // mypkg.Thing() with dict state {'a': 1}: recorded by name, never looked up.
    const std::string s = proto(2) + "cmypkg\nThing\n)\x81}X\x01\x00\x00\x00"s + "aK\x01sb.";
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    PyValue v = r->toPyValue(r->root());
    EXPECT_EQ(v.kind, PyValue::Kind::Object);
    EXPECT_EQ(v.text, "mypkg");
    EXPECT_EQ(v.name, "Thing");
    ASSERT_NE(v.get("a"), nullptr);
    EXPECT_EQ(v.get("a")->integer, 1);
}

TEST(Pickle, DeepNestingIsBoundedNotRecursive)
{
    // 100000 nested lists built with EMPTY_LIST… then APPEND…: the VM never recurses, and the
    // conversion to values stops at its depth bound instead of overflowing the stack.
    const int depth = 100000;
    std::string s = proto(2) + std::string(depth, ']') + std::string(depth - 1, 'a') + ".";
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    PyValue v = r->toPyValue(r->root(), 64);
    int seen = 0;
    const PyValue *p = &v;
    while (p->kind == PyValue::Kind::List && !p->items.empty()) {
        p = &p->items[0];
        ++seen;
    }
    EXPECT_EQ(p->kind, PyValue::Kind::Truncated);
    EXPECT_LE(seen, 64);
}

TEST(Pickle, SelfReferenceEndsInCycleMarker)
{
    // l = []; l.append(l)
    const std::string s = proto(2) + "]q\x00h\x00"s + "a.";
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    PyValue v = r->toPyValue(r->root());
    ASSERT_EQ(v.kind, PyValue::Kind::List);
    ASSERT_EQ(v.items.size(), 1u);
    EXPECT_EQ(v.items[0].kind, PyValue::Kind::Truncated);
}

TEST(Pickle, SharedReferencesCannotExplode)
{
    // l0 = []; l(i+1) = [li, li] for 60 levels: 2^60 leaves if expanded naively.
    std::string s = proto(2) + "]q\x00"s;
    for (int i = 0; i < 60; ++i) {
        s += "(h";
        s += char(i);
        s += "h";
        s += char(i);
        s += "lq";
        s += char(i + 1);
    }
    s += ".";
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    PyValue v = r->toPyValue(r->root(), 64, 10000); // returns: the node budget bounds the work
    EXPECT_EQ(v.kind, PyValue::Kind::List);
}

TEST(Pickle, TruncatedStreamNamesOffset)
{
    const std::string s = proto(2) + "X\xff\xff\x00\x00"s + "abc";
    auto r = parsePickle(bytesOf(s), 1000);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("truncated"), std::string::npos);
    EXPECT_EQ(*r.error().offset, 1002u);
}

TEST(Pickle, MissingStopIsAnError)
{
    const std::string s = proto(2) + "K\x01";
    auto r = parsePickle(bytesOf(s));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("STOP"), std::string::npos);
}

TEST(Pickle, MemoGetOfUnstoredKeyFails)
{
    const std::string s = proto(2) + "h\x05.";
    auto r = parsePickle(bytesOf(s));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("memo"), std::string::npos);
}

TEST(Pickle, HugeMemoIndexAllocatesNothing)
{
    // LONG_BINPUT 0x7fffffff must not size a vector by that number.
    const std::string s = proto(2) + "K\x07r\xff\xff\xff\x0fj\xff\xff\xff\x0f.";
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    EXPECT_EQ(r->integer(r->root()), 7);
}

TEST(Pickle, UnsupportedOpcodeIsNamed)
{
    const std::string s = proto(2) + "\xf0.";
    auto r = parsePickle(bytesOf(s));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("0xf0"), std::string::npos);
}

TEST(Pickle, StackUnderflowIsAnError)
{
    for (const char *body : {"t", "a", "s", "R", "b", "0.", "u", "\x85"}) {
        const std::string s = proto(2) + body + ".";
        auto r = parsePickle(bytesOf(s));
        EXPECT_FALSE(r.ok()) << "opcode " << body;
    }
}

TEST(Pickle, Latin1BytesFromCodecsEncode)
{
    // Protocol 2's bytes: _codecs.encode('\xff\x00', 'latin1') with the text in UTF-8.
    const std::string s = proto(2) + "c_codecs\nencode\nX\x03\x00\x00\x00\xc3\xbf\x00"s +
                          "X\x06\x00\x00\x00latin1\x86R."s;
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    EXPECT_EQ(r->kind(r->root()), NodeKind::Bytes);
    EXPECT_EQ(r->bytes(r->root()), "\xff\x00"s);
}

#include "read/mappedfile.h"
#include "testenv.h"

#include <cstring>
#include <filesystem>

namespace {

// Structural equality of decoded values (floats bitwise, so NaN equals NaN).
bool same(const PyValue &a, const PyValue &b)
{
    if (a.kind != b.kind || a.boolean != b.boolean || a.integer != b.integer ||
        std::memcmp(&a.real, &b.real, sizeof(double)) != 0 || a.text != b.text ||
        a.name != b.name || a.ints != b.ints || a.items.size() != b.items.size() ||
        a.dict.size() != b.dict.size())
        return false;
    for (size_t i = 0; i < a.items.size(); ++i)
        if (!same(a.items[i], b.items[i]))
            return false;
    for (size_t i = 0; i < a.dict.size(); ++i)
        if (!same(a.dict[i].first, b.dict[i].first) || !same(a.dict[i].second, b.dict[i].second))
            return false;
    return true;
}

} // namespace

// DCP's per-chunk dataclasses are folded into compact records while parsing; every .metadata
// torch wrote for the fixtures and the demo must decode to exactly what the plain decoding gives.
TEST(PickleRecords, FoldedMetadataEqualsPlainDecoding)
{
    namespace fs = std::filesystem;
    const fs::path fixtures = fixturesDir();
    if (!fs::exists(fixtures / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    int files = 0;
    size_t fastRecords = 0;
    for (const fs::path &root : {fixtures, fs::path(toolsDir()) / ".." / "resources" / "demo"}) {
        for (const auto &e : fs::recursive_directory_iterator(root)) {
            const std::string name = e.path().filename().string();
            if (!name.ends_with(".metadata") ||
                e.path().string().find("/bad/") != std::string::npos)
                continue;
            auto f = MappedFile::open(e.path().string());
            ASSERT_TRUE(f.ok());
            PickleLimits plain;
            plain.compactRecords = false;
            auto a = parsePickle((*f)->bytes(), 0, plain);
            PickleLimits prefaulted; // the helper thread's path, which big files take
            prefaulted.prefaultFrom = 0;
            auto b = parsePickle((*f)->bytes(), 0, prefaulted);
            PickleLimits opcodes; // records folded, but none read by the fast path
            opcodes.fastRecords = false;
            auto c = parsePickle((*f)->bytes(), 0, opcodes);
            ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << e.path();
            EXPECT_LT(b->nodeCount(), a->nodeCount()) << e.path() << ": nothing was folded";
            EXPECT_EQ(c->fastRecordCount(), 0u);
            const PyValue fast = b->toPyValue(b->root(), 64, 1u << 26);
            EXPECT_TRUE(same(a->toPyValue(a->root(), 64, 1u << 26), fast)) << e.path();
            EXPECT_TRUE(same(c->toPyValue(c->root(), 64, 1u << 26), fast)) << e.path();
            fastRecords += b->fastRecordCount();
            ++files;
        }
    }
    EXPECT_GE(files, 5);
    EXPECT_GT(fastRecords, 100u); // torch's own output takes the fast path
}

namespace {

// Decodes with and without the records' fast path: the same value, or the same error.
void expectSameWithFastRecords(std::span<const uint8_t> bytes, const std::string &what,
                               PickleLimits limits = {})
{
    PickleLimits opcodes = limits;
    opcodes.fastRecords = false;
    auto slow = parsePickle(bytes, 0, opcodes);
    auto fast = parsePickle(bytes, 0, limits);
    ASSERT_EQ(slow.ok(), fast.ok())
        << what << ": " << (slow.ok() ? fast.error() : slow.error()).toString();
    if (!slow.ok()) {
        EXPECT_EQ(slow.error().toString(), fast.error().toString()) << what;
        return;
    }
    EXPECT_TRUE(same(slow->toPyValue(slow->root()), fast->toPyValue(fast->root()))) << what;
}

} // namespace

#include <shardscope/checkpoint.h>

#include <fstream>
#include <random>
#include <unistd.h>

// Mutated copies of a real torch-written .metadata (bytes flipped, opcodes swapped in, the
// stream cut short) must decode or fail with an error, never crash or hang; through the whole
// reader too (a temporary checkpoint directory per mutant).
TEST(PickleFuzz, MutatedMetadataNeverCrashes)
{
    namespace fs = std::filesystem;
    const fs::path meta = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini" /
                          "iter_0000020" / ".metadata";
    auto f = MappedFile::open(meta.string());
    ASSERT_TRUE(f.ok()) << f.error().toString();
    const std::vector<uint8_t> original((*f)->bytes().begin(), (*f)->bytes().end());
    std::mt19937_64 rng(20261130);
    const uint8_t opcodes[] = {'(', ')',  '.',  '0',  '1',  '2',  'N',  'J',  'K',  'M',  'X', 'a',
                               'b', 'c',  'e',  'h',  'j',  'l',  'q',  'r',  's',  't',  'u', '}',
                               ']', 0x85, 0x86, 0x87, 0x88, 0x8c, 0x93, 0x94, 0x95, 0x81, 'R', 'Q'};
    const fs::path dir =
        fs::temp_directory_path() / ("shardscope-fuzz-" + std::to_string(getpid()));
    fs::create_directories(dir);
    int decoded = 0;
    for (int i = 0; i < 600; ++i) {
        std::vector<uint8_t> m = original;
        const int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = rng() % m.size();
            switch (rng() % 3) {
            case 0:
                m[at] ^= uint8_t(1u << (rng() % 8));
                break;
            case 1:
                m[at] = opcodes[rng() % sizeof(opcodes)];
                break;
            default:
                m.resize(std::max<size_t>(at, 1));
                break;
            }
        }
        expectSameWithFastRecords(m, "mutant " + std::to_string(i));
        auto r = parsePickle(m);
        if (r.ok()) {
            ++decoded;
            (void)r->toPyValue(r->root(), 64, 1u << 16);
        } else {
            EXPECT_EQ(r.error().toString().find('\n'), std::string::npos);
        }
        if (i % 6 == 0) { // the whole reader on every sixth mutant
            std::ofstream(dir / ".metadata", std::ios::binary)
                .write(reinterpret_cast<const char *>(m.data()), std::streamsize(m.size()));
            auto index = openCheckpoint(dir.string());
            if (!index.ok()) {
                EXPECT_EQ(index.error().toString().find('\n'), std::string::npos);
            }
        }
    }
    fs::remove_all(dir);
    EXPECT_GT(decoded, 0); // some mutants stay valid pickles, so the decoders ran deep as well
}

// A hand-made pickle that slips a DCP dataclass into an older dict between its NEWOBJ and its
// BUILD, then builds it: folding it into a record would cut the dict's items away, so the
// decoder must keep it a plain object and the dict intact.
TEST(PickleRecords, ForeignAppendStopsTheFold)
{
    const std::string cls = "\x8c\x25torch.distributed.checkpoint.metadata\x94"s + "\x8c\x14" +
                            "ChunkStorageMetadata\x93\x94"s;
    const std::string s = proto(4) + "}\x94(" + "\x8c\x01k" + cls + ")\x81\x94" + "u" + // D['k']=T
                          "h\x03" +                                                     // T again
                          "}(\x8c\x07offsets" + "K\x01\x85" + "\x8c\x05sizes" + "K\x02\x85" +
                          "ub0" + "]K\x07" + "a0]K\x07" +
                          "a0" +     // new values reuse any space a fold freed
                          "h\x00."s; // return D
    auto r = parsePickle(bytesOf(s));
    ASSERT_TRUE(r.ok()) << r.error().toString();
    PyValue v = r->toPyValue(r->root());
    ASSERT_EQ(v.kind, PyValue::Kind::Dict);
    ASSERT_EQ(v.dict.size(), 1u);
    const PyValue &t = v.dict[0].second;
    EXPECT_EQ(t.kind, PyValue::Kind::Object);
    EXPECT_EQ(t.name, "ChunkStorageMetadata");
    ASSERT_NE(t.get("offsets"), nullptr);
}

namespace {

// A list of MetadataIndex objects pickled as Python does, with a memo counter so that a test
// can refer back to any slot. Pieces must be added in stream order (one statement each): the
// counter follows them.
struct RecordStream
{
    std::string s = proto(4);
    int memo = 0;
    int cls = -1, size = -1, objSlot = -1, dictSlot = -1, argsSlot = -1;
    std::map<std::string, int> keySlot;

    static std::string get(int slot) { return "h"s + char(uint8_t(slot)); }
    static std::string str(const std::string &t) { return "\x8c"s + char(uint8_t(t.size())) + t; }
    int put()
    {
        s += "\x94";
        return memo++;
    }
    RecordStream()
    {
        s += "]";
        put();
        s += "(" + str("torch.distributed.checkpoint.metadata");
        put();
        s += str("MetadataIndex") + "\x93";
        cls = put();
        s += str("torch");
        put();
        s += str("Size") + "\x93";
        size = put();
    }
    void key(const std::string &k)
    {
        s += str(k);
        keySlot[k] = put();
    }
    // One state item: the key, then the value's bytes as they are.
    void value(const std::string &k, const std::string &bytes)
    {
        key(k);
        s += bytes;
    }
    // torch.Size(ints), as torch pickles it.
    void sizeCall(const std::string &ints, const std::string &tuple)
    {
        s += get(size) + ints + tuple;
        put();
        s += "\x85";
        argsSlot = put();
        s += "R";
        put();
    }
    // One object: `body` adds its state dict's items, between MARK and SETITEMS.
    void object(const std::function<void()> &body, const std::string &end = "ub")
    {
        s += get(cls) + ")\x81";
        objSlot = put();
        s += "}";
        dictSlot = put();
        s += "(";
        body();
        s += end;
    }
    void plainObject()
    {
        object([this] {
            key("fqn");
            s += str("model.layers.0.weight");
            key("index");
            s += "K\x02";
            key("offset");
            s += "K\x04K\x00\x86"s;
        });
    }
};

} // namespace

// The fast path reads records the way the opcodes would, and gives way to them for any other
// shape: every variant decodes the same (or fails the same) either way.
TEST(PickleRecords, FastPathMatchesTheOpcodes)
{
    struct Variant
    {
        const char *name;
        std::function<void(RecordStream &)> second; // after one object the opcodes folded
        bool fast = true;                           // whether the second object takes the fast path
        std::function<std::string(const RecordStream &)> tail = [](const RecordStream &) {
            return "e."s;
        };
    };
    using R = RecordStream;
    const std::vector<Variant> variants = {
        {"usual", [](R &r) { r.plainObject(); }},
        {"keys by memo reference",
         [](R &r) {
             r.object([&] {
                 r.s += R::get(r.keySlot["fqn"]) + R::str("x");
                 r.s += R::get(r.keySlot["index"]) + "J\xff\xff\xff\xff";
             });
         }},
        {"torch.Size, LONG1, a BINUNICODE",
         [](R &r) {
             r.object([&] {
                 r.key("fqn");
                 r.s += "X\x03\x00\x00\x00"s + "abc";
                 r.key("index");
                 r.s += "\x8a\x05\x00\x00\x00\x00\x01"s;
                 r.key("offset");
                 r.sizeCall("K\x03M\x00\x01"s, "\x86");
             });
         }},
        {"None, True, an empty torch.Size and MARK TUPLE",
         [](R &r) {
             r.object([&] {
                 r.key("fqn");
                 r.s += "N";
                 r.key("index");
                 r.s += "\x88";
                 r.key("offset");
                 r.sizeCall("", ")");
             });
         }},
        {"MARK TUPLE", [](R &r) { r.object([&] { r.value("offset", "(K\x01K\x02t"); }); }},
        {"the dict's slot used afterwards", [](R &r) { r.plainObject(); }, true,
         [](const R &r) { return "e" + R::get(r.dictSlot) + "."; }},
        {"the object's slot used afterwards", [](R &r) { r.plainObject(); }, true,
         [](const R &r) { return "e" + R::get(r.objSlot) + "."; }},
        {"the args tuple's slot used afterwards",
         [](R &r) {
             r.object([&] {
                 r.key("offset");
                 r.sizeCall("K\x01", "\x85");
             });
         },
         true, [](const R &r) { return "e" + R::get(r.argsSlot) + "."; }},
        {"a value that is the object itself",
         [](R &r) { r.object([&] { r.value("fqn", R::get(r.objSlot)); }); }, false},
        {"a value that is the state dict",
         [](R &r) { r.object([&] { r.value("fqn", R::get(r.dictSlot)); }); }, false},
        {"a FRAME inside",
         [](R &r) { r.object([&] { r.value("fqn", "\x95\x00\x00\x00\x00\x00\x00\x00\x00N"s); }); },
         false},
        {"keys out of order",
         [](R &r) {
             r.object([&] {
                 r.value("offset", "N");
                 r.value("fqn", "N");
             });
         },
         false},
        {"an unknown key", [](R &r) { r.object([&] { r.value("rank", "N"); }); }, false},
        {"a list value", [](R &r) { r.object([&] { r.value("fqn", "]"); }); }, false},
        {"four ints", [](R &r) { r.object([&] { r.value("offset", "(K\x01K\x02K\x03K\x04t"); }); },
         false},
        {"an int too big for a word",
         [](R &r) {
             r.object([&] { r.value("index", "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40"s); });
         },
         false},
        {"SETITEMS then no BUILD", [](R &r) { r.object([&] { r.value("fqn", "N"); }, "u0"); },
         false},
        {"EXT4 where a tuple should end",
         [](R &r) {
             r.object([&] {
                 r.key("offset");
                 r.sizeCall("", "\x84");
             });
         },
         false},
        {"a memo slot rewritten before",
         [](R &r) {
             r.s += "K\x07r\x00\x00\x01\x00"s + "0"; // LONG_BINPUT 65536 (sparse), POP
             r.plainObject();
         },
         false},
        {"truncated inside", [](R &r) { r.object([&] { r.key("fqn"); }, ""); }, false,
         [](const R &) { return ""s; }},
    };
    for (const Variant &v : variants) {
        RecordStream r;
        r.plainObject(); // the opcodes fold it: the fast path is armed from here on
        v.second(r);
        const std::string text = r.s + v.tail(r);
        const std::vector<uint8_t> bytes(text.begin(), text.end());
        expectSameWithFastRecords(bytes, v.name);
        PickleLimits fewMarks; // the list's MARK and the object's: a third is one too many
        fewMarks.maxMarks = 2;
        expectSameWithFastRecords(bytes, std::string(v.name) + ", two MARKs at most", fewMarks);
        auto fast = parsePickle(bytes);
        const bool tookFastPath = fast.ok() ? fast->fastRecordCount() == 1 : false;
        if (fast.ok() || !v.fast) {
            EXPECT_EQ(tookFastPath, v.fast) << v.name;
        }
    }
}

// Two classes of the same name (a hand-made pickle): only the first is folded into records, so
// that every object keeps its own class, whichever of them came first and however often.
TEST(PickleRecords, SecondClassOfTheNameStaysItself)
{
    RecordStream r;
    r.s += RecordStream::str("torch.distributed.checkpoint.other");
    r.put();
    r.s += RecordStream::str("MetadataIndex") + "\x93";
    const int other = r.put();
    const int mine = r.cls;
    for (int c : {mine, other, other, mine, other, mine}) {
        r.cls = c;
        r.plainObject();
    }
    const std::string text = r.s + "e.";
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    expectSameWithFastRecords(bytes, "two classes");
    auto a = parsePickle(bytes);
    ASSERT_TRUE(a.ok()) << a.error().toString();
    const PyValue v = a->toPyValue(a->root());
    ASSERT_EQ(v.items.size(), 3u + 6u); // the three globals above the MARK, then the objects
    const char *modules[] = {"torch.distributed.checkpoint.metadata",
                             "torch.distributed.checkpoint.other"};
    const int which[] = {0, 1, 1, 0, 1, 0};
    for (int i = 0; i < 6; ++i) {
        const PyValue &o = v.items[3 + i];
        EXPECT_EQ(o.kind, PyValue::Kind::Object) << i;
        EXPECT_EQ(o.text, modules[which[i]]) << i;
    }
}
