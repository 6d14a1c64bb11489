// SPDX-License-Identifier: MIT
// The safe pickle decoder against hostile and malformed streams (hand-built: these are the
// inputs no well-behaved writer produces, so no tool can generate them for us).
#include "read/pickle.h"

#include <gtest/gtest.h>

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
            ASSERT_TRUE(a.ok() && b.ok()) << e.path();
            EXPECT_LT(b->nodeCount(), a->nodeCount()) << e.path() << ": nothing was folded";
            EXPECT_TRUE(
                same(a->toPyValue(a->root(), 64, 1u << 26), b->toPyValue(b->root(), 64, 1u << 26)))
                << e.path();
            ++files;
        }
    }
    EXPECT_GE(files, 5);
}

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
