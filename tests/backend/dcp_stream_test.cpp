// SPDX-License-Identifier: MIT
// storage_data indexed while the decoder runs (StorageSink) must give exactly the index that
// decoding first and indexing afterwards gives, and the records it drops must stay dropped.
#include "read/pickle.h"
#include "read/readers.h"
#include "sameindex.h"
#include "testenv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

using namespace shardscope;
using namespace shardscope::detail;
namespace fs = std::filesystem;

namespace {

// Builds hand-made pickles opcode by opcode, counting memo slots.
struct PickleText
{
    std::string s = std::string("\x80\x04", 2);
    int memo = 0;
    std::map<std::string, int> classes;
    int memoize()
    {
        s += '\x94';
        return memo++;
    }
    void str(std::string_view x)
    {
        s += '\x8c';
        s += char(x.size());
        s += x;
    }
    void get(int i)
    {
        s += 'h';
        s += char(i);
    }
    void integer(int i)
    {
        s += 'K';
        s += char(i);
    }
    // An instance of a DCP dataclass with these (name, value-writer) fields; its memo slot.
    template<typename... F>
    int dataclass(std::string_view module, std::string_view name, F... fields)
    {
        // Classes are memoised as the pickler does: a second global of the name is not folded.
        if (auto it = classes.find(std::string(name)); it != classes.end()) {
            get(it->second);
        } else {
            str(module);
            str(name);
            s += '\x93';
            classes[std::string(name)] = memoize();
        }
        s += ')';
        s += '\x81';
        const int slot = memoize();
        s += "}(";
        (fields(*this), ...);
        s += "ub";
        return slot;
    }
    int metadataIndex(std::string_view fqn)
    {
        return dataclass(
            "torch.distributed.checkpoint.metadata", "MetadataIndex",
            [&](PickleText &p) { p.str("fqn"), p.str(fqn); },
            [](PickleText &p) { p.str("index"), p.integer(0); },
            [](PickleText &p) { p.str("offset"), p.integer(0), p.s += '\x85'; });
    }
    int storageInfo(int offset)
    {
        return dataclass(
            "torch.distributed.checkpoint.filesystem", "_StorageInfo",
            [](PickleText &p) { p.str("relative_path"), p.str("__0_0.distcp"); },
            [&](PickleText &p) { p.str("offset"), p.integer(offset); },
            [](PickleText &p) { p.str("length"), p.integer(4); });
    }
    std::span<const uint8_t> bytes() const
    {
        return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
    }
};

// Takes every storage_data batch, keeping what the arena says of it while it may be read.
struct RecordingSink : DictSink
{
    bool accept = true;
    std::vector<std::pair<std::string, int64_t>> items; // fqn, _StorageInfo offset
    bool offer(const PickleArena &a, std::string_view name, NodeId, std::span<const NodeId> pairs,
               uint64_t) override
    {
        if (!accept || name != "storage_data")
            return false;
        for (size_t i = 0; i + 1 < pairs.size(); i += 2)
            items.emplace_back(std::string(a.bytes(a.get(pairs[i], "fqn"))),
                               a.integer(a.get(pairs[i + 1], "offset")));
        return true;
    }
};

} // namespace

// Every DCP checkpoint torch wrote for the tests (and the bundled demo, whose storage_data
// comes in two SETITEMS batches) indexes the same either way.
TEST(DcpStream, SameIndexAsIndexingAfterDecoding)
{
    const fs::path fixtures = fixturesDir();
    if (!fs::exists(fixtures / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    std::vector<fs::path> roots = {fixtures, fs::path(toolsDir()) / ".." / "resources" / "demo"};
    if (fs::exists(fixtures / ".." / "layout-fixtures"))
        roots.push_back(fixtures / ".." / "layout-fixtures");
    int dirs = 0;
    for (const fs::path &root : roots)
        for (const auto &e : fs::recursive_directory_iterator(root)) {
            const std::string name = e.path().filename().string();
            if (name != ".metadata" && !(name.starts_with("__0") && name.ends_with(".metadata")))
                continue;
            const std::string dir = e.path().parent_path().string();
            CheckpointIndex streamed, plain;
            const Status a = readDcp(dir, streamed, true);
            const Status b = readDcp(dir, plain, false);
            ASSERT_EQ(a.ok(), b.ok()) << dir;
            if (!a.ok()) {
                // The same error, naming the same file and key. The offset may differ: taken
                // while decoding, an item knows its batch's opcode; afterwards, a folded record
                // knows only its file.
                const Error &x = a.error(), &y = b.error();
                EXPECT_EQ(x.message, y.message) << dir;
                EXPECT_EQ(x.file, y.file) << dir;
                EXPECT_EQ(x.key, y.key) << dir;
                EXPECT_TRUE(x.offset.has_value()) << x.toString();
                continue;
            }
            expectSameIndex(streamed, plain, dir);
            ++dirs;
        }
    EXPECT_GE(dirs, 8);
}

// OpenOptions::onKeysKnown: called once, before any storage location is known, with every key,
// nesting, shape, dtype and chunk count the finished open ends up with, and changing nothing.
TEST(DcpStream, KeysKnownBeforeStorageAreTheFinalOnes)
{
    const fs::path fixtures = fixturesDir();
    if (!fs::exists(fixtures / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    struct Seen
    {
        std::string key, dtype;
        std::vector<std::string> parts;
        std::vector<int64_t> shape;
        size_t chunks = 0;
        bool object = false;
        bool operator==(const Seen &) const = default;
    };
    auto seenOf = [](const CheckpointIndex &index, std::vector<Seen> &out) {
        out.clear();
        for (const TensorEntry &t : index.tensors)
            out.push_back({t.key.str(), t.dtypeName, t.path.parts(t.key), t.shape.toVector(),
                           t.chunks.size()});
        for (const ObjectEntry &o : index.objects)
            out.push_back({o.key.str(), {}, o.path.parts(o.key), {}, 0, true});
    };
    std::vector<fs::path> roots = {fixtures, fs::path(toolsDir()) / ".." / "resources" / "demo"};
    int called = 0, dirs = 0;
    for (const fs::path &root : roots)
        for (const auto &e : fs::recursive_directory_iterator(root)) {
            if (e.path().filename() != ".metadata")
                continue;
            const std::string dir = e.path().parent_path().string();
            SCOPED_TRACE(dir);
            ++dirs;
            std::vector<Seen> early;
            int calls = 0;
            size_t placed = 0;
            OpenOptions options;
            options.onKeysKnown = [&](const CheckpointIndex &keys) {
                ++calls;
                seenOf(keys, early);
                for (const TensorEntry &t : keys.tensors)
                    for (const Location &l : t.chunks)
                        placed += l.file != kUnassigned;
                for (const ObjectEntry &o : keys.objects)
                    placed += o.location.has_value();
            };
            auto opened = openCheckpoint(dir, options);
            auto plain = openCheckpoint(dir);
            ASSERT_EQ(opened.ok(), plain.ok());
            if (!opened.ok())
                continue;
            expectSameIndex(*opened, *plain, dir);
            EXPECT_LE(calls, 1);
            if (calls == 0) // torch_dist with common.pt, or no planner data
                continue;
            ++called;
            EXPECT_EQ(placed, 0u) << "called after storage locations were read";
            std::vector<Seen> final;
            seenOf(*opened, final);
            EXPECT_TRUE(early == final);
        }
    EXPECT_GE(dirs, 8);
    EXPECT_GE(called, 6);
}

// The sink is offered the items of a dict that is the value of a string key, in stream order,
// and the dict keeps none of those it took.
TEST(PickleSink, TakesStorageItemsInOrder)
{
    PickleText p;
    p.str("storage_data");
    p.s += '}';
    p.memoize();
    p.s += '(';
    p.metadataIndex("a.w");
    p.storageInfo(0);
    p.metadataIndex("a.b");
    p.storageInfo(4);
    p.s += "u.";
    RecordingSink sink;
    PickleLimits limits;
    limits.dictSink = &sink;
    auto r = parsePickle(p.bytes(), 0, limits);
    ASSERT_TRUE(r.ok()) << r.error().toString();
    ASSERT_EQ(sink.items.size(), 2u);
    EXPECT_EQ(sink.items[0].first, "a.w");
    EXPECT_EQ(sink.items[1].first, "a.b");
    EXPECT_EQ(sink.items[1].second, 4);
    EXPECT_EQ(r->size(r->root()), 0u);

    // Declined: the items stay where they were.
    RecordingSink declining;
    declining.accept = false;
    limits.dictSink = &declining;
    auto kept = parsePickle(p.bytes(), 0, limits);
    ASSERT_TRUE(kept.ok());
    EXPECT_TRUE(declining.items.empty());
    EXPECT_EQ(kept->size(kept->root()), 2u);
}

// A hand-made pickle that refers to a storage_data key after the sink took it gets a clean
// error, not the fields of whatever record reused its place.
TEST(PickleSink, DroppedRecordCannotBeReferred)
{
    PickleText p;
    p.str("storage_data");
    p.s += '}';
    p.memoize();
    p.s += '(';
    const int key = p.metadataIndex("a.w");
    p.storageInfo(0);
    p.s += "u0";
    p.get(key);
    p.s += '.';
    RecordingSink sink;
    PickleLimits limits;
    limits.dictSink = &sink;
    auto r = parsePickle(p.bytes(), 0, limits);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().toString().find("dropped while decoding"), std::string::npos)
        << r.error().toString();
}

// A record that was also stored elsewhere (here: appended to a list) before its batch went to
// the sink must keep its fields, even when a later batch's records are made after it.
TEST(PickleSink, RecordStoredElsewhereIsKept)
{
    PickleText p;
    p.s += ']';
    const int list = p.memoize();
    p.str("storage_data");
    p.s += '}';
    p.memoize();
    p.s += '(';
    const int key = p.metadataIndex("a.w");
    p.get(list);
    p.get(key);
    p.s += "a0"; // list.append(key), then the list off the stack
    p.storageInfo(0);
    p.s += "u(";
    p.metadataIndex("zzz.zzz");
    p.storageInfo(8);
    p.s += "u00."; // the list is what remains: the root
    RecordingSink sink;
    PickleLimits limits;
    limits.dictSink = &sink;
    auto r = parsePickle(p.bytes(), 0, limits);
    ASSERT_TRUE(r.ok()) << r.error().toString();
    EXPECT_EQ(sink.items.size(), 2u);
    const PyValue v = r->toPyValue(r->root());
    ASSERT_EQ(v.kind, PyValue::Kind::List);
    ASSERT_EQ(v.items.size(), 1u);
    ASSERT_NE(v.items[0].get("fqn"), nullptr);
    EXPECT_EQ(v.items[0].get("fqn")->text, "a.w");
}
