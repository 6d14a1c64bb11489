// SPDX-License-Identifier: MIT
// The persistent index: read back, it is the index a decode gives, for every fixture and any
// thread count; a changed, replaced or truncated metadata file is decoded again; a corrupt entry
// is ignored with a note; the least recently used entries go first.
#include "read/indexcache.h"
#include "read/indexcodec.h"
#include "read/readers.h"
#include "sameindex.h"
#include "testenv.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace shardscope;
using namespace shardscope::detail;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string &name)
{
    // Removed when the test program ends.
    static struct Scratch
    {
        fs::path root =
            fs::temp_directory_path() / ("shardscope-index-cache-" + std::to_string(::getpid()));
        ~Scratch()
        {
            std::error_code ec;
            fs::remove_all(root, ec);
        }
    } s;
    const fs::path p = s.root / name;
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
}

IndexCacheSettings settingsIn(const fs::path &dir)
{
    IndexCacheSettings s;
    s.dir = dir.string();
    s.maxBytes = uint64_t(1) << 30;
    s.minBytes = 0;
    s.settleSeconds = 0;
    return s;
}

// What openCheckpoint gives through the cache with these settings (the same steps it takes).
Result<CheckpointIndex> openCached(const std::string &dir, const IndexCacheSettings &settings,
                                   int threads = 0)
{
    CheckpointIndex index;
    index.inputPath = dir;
    index.dataDir = dir;
    Status st = readDcpCached(dir, index, threads, {}, settings);
    detail::waitForIndexWrites(); // so that the test sees the entry on disk
    if (!st)
        return st.error();
    statFiles(index);
    return index;
}

Result<CheckpointIndex> openDecoded(const std::string &dir)
{
    CheckpointIndex index;
    index.inputPath = dir;
    index.dataDir = dir;
    Status st = readDcp(dir, index);
    if (!st)
        return st.error();
    statFiles(index);
    return index;
}

std::string cacheNote(const CheckpointIndex &index)
{
    auto it = index.info.find("index_cache");
    return it == index.info.end() ? std::string() : it->second;
}

std::vector<std::string> metadataDirs()
{
    std::vector<std::string> out;
    const fs::path fixtures = fixturesDir();
    for (const fs::path &root : {fixtures, fs::path(toolsDir()) / ".." / "resources" / "demo"})
        for (const auto &e : fs::recursive_directory_iterator(root))
            if (e.path().filename() == ".metadata")
                out.push_back(e.path().parent_path().string());
    return out;
}

fs::path onlyEntry(const fs::path &cache)
{
    fs::path found;
    for (const auto &e : fs::directory_iterator(cache))
        if (e.path().extension() == ".ssidx")
            found = e.path();
    return found;
}

std::string readAll(const fs::path &p)
{
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

void writeAll(const fs::path &p, const std::string &bytes)
{
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

fs::path copyOf(const std::string &fixture, const std::string &name)
{
    const fs::path to = scratch(name) / "ckpt";
    fs::copy(fs::path(fixturesDir()) / fixture, to, fs::copy_options::recursive);
    return to;
}

} // namespace

TEST(IndexCache, EveryFixtureReadsBackAsDecoded)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const fs::path cache = scratch("every");
    int dirs = 0;
    for (const std::string &dir : metadataDirs()) {
        SCOPED_TRACE(dir);
        auto decoded = openDecoded(dir);
        auto written = openCached(dir, settingsIn(cache));
        auto read = openCached(dir, settingsIn(cache));
        ASSERT_EQ(decoded.ok(), written.ok());
        ASSERT_EQ(decoded.ok(), read.ok());
        if (!decoded.ok()) { // errors are never stored: the same one each time
            EXPECT_EQ(decoded.error().toString(), read.error().toString());
            continue;
        }
        EXPECT_TRUE(cacheNote(*written).starts_with("writing to ")) << cacheNote(*written);
        EXPECT_TRUE(cacheNote(*read).starts_with("read from ")) << cacheNote(*read);
        expectSameIndex(*decoded, *written, dir);
        expectSameIndex(*decoded, *read, dir);
        // Read, the entries view the entry's mapping; read again, the same mapping (the file
        // was not replaced), even though each read touches the entry's times.
        auto again = openCached(dir, settingsIn(cache));
        ASSERT_TRUE(again.ok());
        expectSameIndex(*decoded, *again, dir);
        if (!read->tensors.empty()) {
            EXPECT_FALSE(read->tensors[0].key.owns());
            EXPECT_EQ(again->tensors[0].key.data(), read->tensors[0].key.data());
        }
        ++dirs;
    }
    EXPECT_GE(dirs, 8);
}

// openCheckpoint itself: the environment picks the directory; the CLI's --no-cache and the
// API's useCache keep it out.
TEST(IndexCache, OpenCheckpointUsesTheEnvironmentsDirectory)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const fs::path cache = scratch("env");
    ::setenv("SHARDSCOPE_CACHE_DIR", cache.c_str(), 1);
    ::setenv("SHARDSCOPE_CACHE_MIN_BYTES", "0", 1);
    ::setenv("SHARDSCOPE_CACHE_SETTLE_SECONDS", "0", 1);
    const std::string dir = (fs::path(fixturesDir()) / "megatron_fsdp_dtensor").string();
    OpenOptions off;
    off.useCache = false;
    auto plain = openCheckpoint(dir, off);
    ASSERT_TRUE(plain.ok());
    EXPECT_TRUE(onlyEntry(cache).empty());
    ::setenv("SHARDSCOPE_NO_CACHE", "1", 1);
    ASSERT_TRUE(openCheckpoint(dir).ok());
    EXPECT_TRUE(onlyEntry(cache).empty());
    ::unsetenv("SHARDSCOPE_NO_CACHE");
    auto first = openCheckpoint(dir), second = openCheckpoint(dir);
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_FALSE(onlyEntry(cache).empty());
    EXPECT_TRUE(cacheNote(*second).starts_with("read from " + cache.string()));
    expectSameIndex(*plain, *second, dir);
    EXPECT_EQ(plain->format, second->format);
    ::unsetenv("SHARDSCOPE_CACHE_DIR");
}

TEST(IndexCache, SameIndexForAnyThreadCount)
{
    // Big enough for eight workers (each takes at least 4,096 entries), and every shape of
    // entry: ranks 0–3, several chunks, strides, explicit paths, objects with and without data.
    CheckpointIndex index;
    index.files = {"__0_0.distcp", "__1_0.distcp"};
    index.transformChains = {{}, {"zstd"}};
    index.problems.push_back({"k", "f", 12, "a problem", Problem::Effect::Holes});
    index.info["dcp_version"] = "1.0.0";
    for (int i = 0; i < 40'000; ++i) {
        TensorEntry t;
        t.key = "model.layers." + std::to_string(i) + ".weight";
        t.dtypeName = i % 3 ? "torch.bfloat16" : "torch.float8_e4m3fn";
        t.dtype = i % 3 ? DType::BFloat16 : DType::Float8E4M3FN;
        const size_t nd = size_t(i % 4);
        for (size_t d = 0; d < nd; ++d)
            t.shape.push_back(int64_t(d + 2 + i % 7));
        for (int c = 0; c < 1 + i % 3; ++c) {
            for (size_t d = 0; d < 2 * nd; ++d)
                t.chunkDims.push_back(int64_t(c * 10 + d));
            t.chunks.push_back({uint32_t(c % 2), uint16_t(i % 2), Encoding::TorchSaveArchive,
                                uint64_t(i) * 100 + uint64_t(c), 64});
        }
        if (i % 11 == 0)
            t.strides = {4, 1};
        t.storageOffset = i % 5;
        if (i % 13 == 0)
            t.path = KeyPath::fromParts(t.key, std::vector<std::string>{"model", "layers.x"});
        index.tensors.push_back(std::move(t));
    }
    for (int i = 0; i < 9'000; ++i) {
        ObjectEntry o;
        o.key = "optimizer.param_to_group_meta." + std::to_string(i);
        if (i % 2)
            o.location = Location{1, 0, Encoding::TorchSaveArchive, uint64_t(i), 7};
        index.objects.push_back(std::move(o));
    }
    IndexCacheKey key{"test", "/nowhere", {}};
    const std::string bytes = encodeIndex(key, index, {"dcp_version"});
    const std::span<const uint8_t> view(reinterpret_cast<const uint8_t *>(bytes.data()),
                                        bytes.size());
    // Written into memory that held something else (a first open reuses the decoder's memo),
    // padding, terminators and all: the same bytes, whether the block was big enough or not.
    for (size_t spare : {bytes.size() + 4096, bytes.size() / 3}) {
        HotVector<char> dirty;
        dirty.resize(spare, char(0xa5));
        dirty.resize(0);
        const HotVector<char> out = encodeIndex(key, index, {"dcp_version"}, std::move(dirty));
        EXPECT_EQ(std::string_view(out.data(), out.size()), bytes) << spare;
    }
    for (bool viewed : {false, true})
        for (int threads : {1, 2, 3, 8}) {
            SCOPED_TRACE(std::to_string(threads) + (viewed ? " threads, viewed" : " threads"));
            CheckpointIndex back; // `bytes` outlive it, as a kept mapping outlives every index
            Status st = decodeIndexBody(view, "mem", back, threads, viewed);
            ASSERT_TRUE(st.ok()) << st.error().toString();
            expectSameIndex(index, back, "threads " + std::to_string(threads));
            // Encoding is a function of the index: what was read writes the same bytes.
            EXPECT_EQ(encodeIndex(key, back, {"dcp_version"}), bytes);
            // Viewed, the entries hold no bytes of their own; copied, all of them.
            const TensorEntry &t = back.tensors[7];
            ASSERT_FALSE(t.key.empty() || t.chunks.empty() || t.shape.empty());
            EXPECT_EQ(t.key.owns(), !viewed);
            EXPECT_EQ(back.objects[3].key.owns(), !viewed);
            EXPECT_EQ(t.chunks.owns(), !viewed);
            EXPECT_EQ(t.shape.owns(), !viewed);
            EXPECT_EQ(std::string_view(t.key.c_str()), t.key.view()); // NUL-terminated
            // A change to a copy leaves the entry, and the bytes it views, as they were.
            TensorEntry changed = t;
            changed.chunks.edit()[0].offset += 1;
            changed.shape.push_back(1);
            changed.key += "x";
            EXPECT_EQ(t.chunks[0].offset, index.tensors[7].chunks[0].offset);
            EXPECT_EQ(t.shape, index.tensors[7].shape);
            EXPECT_EQ(t.key, index.tensors[7].key);
            EXPECT_NE(changed.key, t.key);
        }
    auto k = decodeIndexKey(view, "mem");
    ASSERT_TRUE(k.ok());
    EXPECT_TRUE(*k == key);
}

// The metadata decoded with and without the committing thread: openCheckpoint's `threads`.
TEST(IndexCache, OpenWithOneThreadIsTheSame)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    for (const std::string &dir : metadataDirs()) {
        OpenOptions one, many;
        one.useCache = many.useCache = false;
        one.threads = 1;
        many.threads = 4;
        auto a = openCheckpoint(dir, one), b = openCheckpoint(dir, many);
        ASSERT_EQ(a.ok(), b.ok()) << dir;
        if (a.ok())
            expectSameIndex(*a, *b, dir);
    }
}

TEST(IndexCache, ChangedReplacedOrTruncatedMetadataIsDecodedAgain)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const fs::path ckpt = copyOf("dcp_2ranks", "stale");
    const fs::path cache = ckpt.parent_path() / "cache";
    const fs::path meta = ckpt / ".metadata";
    ASSERT_TRUE(openCached(ckpt.string(), settingsIn(cache)).ok());
    ASSERT_FALSE(onlyEntry(cache).empty());

    // Changed in place, size kept and its modification time put back: one key renamed.
    auto first = openDecoded(ckpt.string());
    ASSERT_TRUE(first.ok());
    const std::string key = first->tensors.front().key.str();
    std::string bytes = readAll(meta);
    std::string renamed = key;
    renamed.back() = key.back() == 'Z' ? 'Y' : 'Z';
    size_t renames = 0;
    for (size_t at = bytes.find(key); at != std::string::npos; at = bytes.find(key, at + 1)) {
        bytes.replace(at, key.size(), renamed);
        ++renames;
    }
    ASSERT_GT(renames, 0u);
    struct stat before
    {
    };
    ASSERT_EQ(::stat(meta.c_str(), &before), 0);
    {
        std::fstream f(meta, std::ios::binary | std::ios::in | std::ios::out); // same inode
        f.write(bytes.data(), std::streamsize(bytes.size()));
    }
    const timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, meta.c_str(), times, 0), 0);
    auto changed = openCached(ckpt.string(), settingsIn(cache));
    ASSERT_TRUE(changed.ok());
    EXPECT_TRUE(cacheNote(*changed).starts_with("the entry was for an earlier version"))
        << cacheNote(*changed);
    EXPECT_EQ(changed->tensors.front().key, renamed);
    expectSameIndex(*openDecoded(ckpt.string()), *changed, "changed in place");

    // Replaced: the same bytes as a new file renamed over it (a new inode).
    writeAll(ckpt / "new.metadata.tmp",
             readAll(fs::path(fixturesDir()) / "dcp_2ranks" / ".metadata"));
    fs::rename(ckpt / "new.metadata.tmp", meta);
    auto replaced = openCached(ckpt.string(), settingsIn(cache));
    ASSERT_TRUE(replaced.ok());
    EXPECT_TRUE(cacheNote(*replaced).starts_with("writing to")) << cacheNote(*replaced);
    EXPECT_EQ(replaced->tensors.front().key, key);
    expectSameIndex(*openDecoded(ckpt.string()), *replaced, "replaced");
    auto again = openCached(ckpt.string(), settingsIn(cache));
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(cacheNote(*again).starts_with("read from")) << cacheNote(*again);

    // Truncated: the decoder's own error, not the stored index.
    fs::resize_file(meta, fs::file_size(meta) / 2);
    auto cut = openCached(ckpt.string(), settingsIn(cache));
    auto cutDecoded = openDecoded(ckpt.string());
    ASSERT_FALSE(cut.ok());
    ASSERT_FALSE(cutDecoded.ok());
    EXPECT_EQ(cut.error().toString(), cutDecoded.error().toString());
}

// The stored index does not depend on the data files: their sizes are read on every open, so a
// cut data file is reported as if nothing had been cached.
TEST(IndexCache, DataFilesAreCheckedOnEveryOpen)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const fs::path ckpt = copyOf("dcp_2ranks", "data");
    const fs::path cache = ckpt.parent_path() / "cache";
    ::setenv("SHARDSCOPE_CACHE_DIR", cache.c_str(), 1);
    ::setenv("SHARDSCOPE_CACHE_MIN_BYTES", "0", 1);
    ::setenv("SHARDSCOPE_CACHE_SETTLE_SECONDS", "0", 1);
    ASSERT_TRUE(openCheckpoint(ckpt.string()).ok());
    fs::resize_file(ckpt / "__1_0.distcp", 10);
    auto hit = openCheckpoint(ckpt.string());
    OpenOptions off;
    off.useCache = false;
    auto plain = openCheckpoint(ckpt.string(), off);
    ASSERT_TRUE(hit.ok() && plain.ok());
    EXPECT_TRUE(cacheNote(*hit).starts_with("read from")) << cacheNote(*hit);
    EXPECT_FALSE(plain->problems.empty());
    expectSameIndex(*plain, *hit, "data file cut");
    ::unsetenv("SHARDSCOPE_CACHE_DIR");
}

TEST(IndexCache, CorruptEntriesAreIgnoredWithANote)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const std::string dir =
        (fs::path(fixturesDir()) / "megatron_fsdp_dtensor" / "iter_0000050").string();
    const fs::path cache = scratch("corrupt");
    auto decoded = openDecoded(dir);
    ASSERT_TRUE(decoded.ok());
    ASSERT_TRUE(openCached(dir, settingsIn(cache)).ok());
    const fs::path entry = onlyEntry(cache);
    ASSERT_FALSE(entry.empty());
    const std::string good = readAll(entry);

    struct Case
    {
        const char *name;
        std::string bytes;
        const char *note;
    };
    std::string flipped = good, schema = good, cut = good.substr(0, good.size() / 2);
    flipped[flipped.size() * 3 / 4] ^= 0x40;
    schema[8] = 99;
    const std::vector<Case> cases = {
        {"a flipped byte", flipped, "checksum mismatch"},
        {"cut in half", cut, "sections of"},
        {"another schema", schema, "schema 99"},
        {"not an index", "hello", "not a ShardScope index file"},
        {"empty", "", "not a ShardScope index file"},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.name);
        writeAll(entry, c.bytes);
        auto opened = openCached(dir, settingsIn(cache));
        ASSERT_TRUE(opened.ok());
        const std::string note = cacheNote(*opened);
        EXPECT_TRUE(note.starts_with("ignored ")) << note;
        EXPECT_NE(note.find(c.note), std::string::npos) << note;
        EXPECT_NE(note.find(entry.string()), std::string::npos) << note;
        EXPECT_NE(note.find("writing to"), std::string::npos) << note; // and replaced
        expectSameIndex(*decoded, *opened, c.name);
        EXPECT_EQ(readAll(entry), good);
    }
}

TEST(IndexCache, LeastRecentlyUsedEntriesAreEvicted)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const fs::path cache = scratch("lru");
    const fs::path f = fixturesDir();
    const std::string a = (f / "dcp_1rank").string(), b = (f / "dcp_2ranks").string(),
                      c = (f / "megatron_fsdp_dtensor" / "iter_0000050").string();
    auto sizeOf = [&](const std::string &dir) {
        const fs::path one = scratch("lru-size");
        EXPECT_TRUE(openCached(dir, settingsIn(one)).ok());
        return fs::file_size(onlyEntry(one));
    };
    IndexCacheSettings s = settingsIn(cache);
    s.maxBytes = std::max(sizeOf(a), sizeOf(b)) + sizeOf(c);
    auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
    ASSERT_TRUE(openCached(a, s).ok());
    pause();
    ASSERT_TRUE(openCached(b, s).ok());
    pause();
    auto hit = openCached(a, s); // a is now the most recently used
    ASSERT_TRUE(hit.ok());
    EXPECT_TRUE(cacheNote(*hit).starts_with("read from")) << cacheNote(*hit);
    pause();
    ASSERT_TRUE(openCached(c, s).ok()); // b must go
    for (const auto &[dir, kept] : {std::pair{a, true}, {b, false}, {c, true}}) {
        auto again = openCached(dir, s);
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(cacheNote(*again).starts_with("read from"), kept)
            << dir << ": " << cacheNote(*again);
        pause();
        if (!kept)
            break; // writing it again evicts another
    }
    // Larger than the whole cache: never written.
    s.maxBytes = 16;
    const fs::path small = scratch("lru-small");
    s.dir = small.string();
    auto big = openCached(a, s);
    ASSERT_TRUE(big.ok());
    EXPECT_TRUE(cacheNote(*big).starts_with("not written")) << cacheNote(*big);
    EXPECT_TRUE(onlyEntry(small).empty());
}

// A file changed moments before the decode began may change again within the same clock tick,
// leaving its times as they were: such an index is not stored.
TEST(IndexCache, MetadataChangedMomentsAgoIsNotStored)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const fs::path ckpt = copyOf("dcp_1rank", "settle");
    const fs::path cache = ckpt.parent_path() / "cache";
    IndexCacheSettings s = settingsIn(cache);
    s.settleSeconds = 3600;
    auto opened = openCached(ckpt.string(), s);
    ASSERT_TRUE(opened.ok());
    EXPECT_TRUE(cacheNote(*opened).starts_with("not written: .metadata changed moments"))
        << cacheNote(*opened);
    EXPECT_FALSE(fs::exists(cache) && !onlyEntry(cache).empty());
}

// A directory the cache makes is the user's alone; one that exists (SHARDSCOPE_CACHE_DIR=/tmp,
// say) keeps its mode.
TEST(IndexCache, MakesItsDirectoryPrivateAndLeavesAnExistingOneAlone)
{
    if (!fs::exists(fs::path(fixturesDir()) / ".complete"))
        GTEST_SKIP() << "fixtures not generated (run through ctest)";
    const std::string dir = (fs::path(fixturesDir()) / "dcp_1rank").string();
    const fs::path root = scratch("modes");
    auto modeOf = [](const fs::path &p) {
        struct stat st
        {
        };
        EXPECT_EQ(::stat(p.c_str(), &st), 0);
        return st.st_mode & 07777;
    };
    const fs::path fresh = root / "a" / "b" / "index";
    ASSERT_TRUE(openCached(dir, settingsIn(fresh)).ok());
    EXPECT_FALSE(onlyEntry(fresh).empty());
    EXPECT_EQ(modeOf(fresh), 0700u);
    EXPECT_EQ(modeOf(onlyEntry(fresh)) & 077, 0u);

    const fs::path shared = root / "shared";
    fs::create_directories(shared);
    ::chmod(shared.c_str(), 01777);
    ASSERT_TRUE(openCached(dir, settingsIn(shared)).ok());
    EXPECT_FALSE(onlyEntry(shared).empty());
    EXPECT_EQ(modeOf(shared), 01777u);
}
