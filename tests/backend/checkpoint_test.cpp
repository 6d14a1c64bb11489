// SPDX-License-Identifier: MIT
// The public backend API on checkpoints written by real torch (tools/make_fixtures.py), checked
// against torch itself (tools/oracle.py).
#include <shardscope/checkpoint.h>
#include <shardscope/tensor.h>

#include "testenv.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace shardscope;

namespace {

std::string fixture(const std::string &name)
{
    return (fs::path(fixturesDir()) / name).string();
}

std::string shellQuote(const std::string &s)
{
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

json runOracle(const std::string &args)
{
    const std::string cmd =
        shellQuote(pythonExe()) + " " + shellQuote(toolsDir() + "/oracle.py") + " " + args;
    std::string out;
    FILE *p = popen(cmd.c_str(), "r");
    if (!p)
        return nullptr;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
        out.append(buf.data(), n);
    if (pclose(p) != 0)
        return nullptr;
    return json::parse(out, nullptr, false);
}

std::string ints(const std::vector<int64_t> &v)
{
    std::string s;
    for (int64_t x : v)
        s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

#define REQUIRE_FIXTURES()                                                                         \
    if (!fs::exists(fixturesDir() + "/.complete"))                                                 \
    GTEST_SKIP() << "fixtures not generated (run through ctest)"

} // namespace

// A sub-box that straddles chunk boundaries reads only the chunks it touches and equals torch's
// narrow() of the fully loaded tensor, bit for bit.
TEST(Checkpoint, SubBoxAcrossShardsMatchesTorch)
{
    REQUIRE_FIXTURES();
    const std::string path = fixture("dcp_4ranks");
    auto index = openCheckpoint(path);
    ASSERT_TRUE(index.ok()) << index.error().toString();
    int checked = 0;
    for (const TensorEntry &t : index->tensors) {
        if (t.chunks.size() < 2 || t.ndim() == 0 || t.numel() < 4 || checked >= 3)
            continue;
        Box box;
        for (int64_t d : t.shape) {
            box.offsets.push_back(d > 2 ? 1 : 0);
            box.sizes.push_back(d > 2 ? d - 2 : d);
        }
        auto data = readTensor(*index, t, box);
        ASSERT_TRUE(data.ok()) << data.error().toString();
        json want = runOracle("box " + shellQuote(path) + " " + shellQuote(t.key.str()) + " " +
                              ints(box.offsets) + " " + ints(box.sizes));
        ASSERT_TRUE(want.is_object()) << "oracle failed for " << t.key;
        EXPECT_EQ(sha256Hex(*data), want["sha256"].get<std::string>()) << t.key;
        ++checked;
    }
    EXPECT_GT(checked, 0) << "no multi-chunk tensor in the 4-rank fixture";
}

TEST(Checkpoint, BoxOutsideTheTensorIsAnError)
{
    REQUIRE_FIXTURES();
    auto index = openCheckpoint(fixture("dcp_2ranks"));
    ASSERT_TRUE(index.ok()) << index.error().toString();
    for (const TensorEntry &t : index->tensors) {
        if (t.ndim() == 0)
            continue;
        Box box{std::vector<int64_t>(t.ndim(), 0), t.shape.toVector()};
        box.sizes[0] += 1;
        auto r = readTensor(*index, t, box);
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().key, t.key);
        return;
    }
}

// Every BYTE_IO object of a multi-rank DCP decodes through the safe decoder.
TEST(Checkpoint, ObjectsDecode)
{
    REQUIRE_FIXTURES();
    for (const char *name : {"dcp_2ranks", "megatron_fsdp_dtensor", "megatron_torch_dist"}) {
        auto index = openCheckpoint(fixture(name));
        ASSERT_TRUE(index.ok()) << index.error().toString();
        ASSERT_FALSE(index->objects.empty()) << name;
        for (const ObjectEntry &o : index->objects) {
            auto v = readObject(*index, o);
            EXPECT_TRUE(v.ok()) << name << " " << o.key << ": " << v.error().toString();
        }
    }
}

TEST(Checkpoint, MegatronRootsAreDetected)
{
    REQUIRE_FIXTURES();
    const std::map<std::string, Format> want = {
        {"megatron_torch_dist", Format::MegatronTorchDist},
        {"megatron_fsdp_dtensor", Format::MegatronFsdpDtensor},
        {"megatron_legacy", Format::MegatronLegacy},
        {"dcp_1rank", Format::Dcp},
        {"safetensors_sharded", Format::SafetensorsIndex},
    };
    for (const auto &[name, format] : want) {
        auto index = openCheckpoint(fixture(name));
        ASSERT_TRUE(index.ok()) << name << ": " << index.error().toString();
        EXPECT_EQ(index->format, format) << name;
        EXPECT_TRUE(index->problems.empty()) << name << ": " << index->problems.front().toString();
    }
}

// Opening and reading everything leaves the checkpoint exactly as it was.
TEST(Checkpoint, NothingIsWritten)
{
    REQUIRE_FIXTURES();
    const std::string dir = fixture("dcp_2ranks");
    auto snapshot = [&] {
        std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> s;
        for (const auto &e : fs::recursive_directory_iterator(dir))
            s[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, e.last_write_time()};
        return s;
    };
    const auto before = snapshot();
    auto index = openCheckpoint(dir);
    ASSERT_TRUE(index.ok());
    for (const TensorEntry &t : index->tensors)
        ASSERT_TRUE(readTensor(*index, t).ok()) << t.key;
    for (const ObjectEntry &o : index->objects)
        (void)readObject(*index, o);
    EXPECT_EQ(before, snapshot());
}

// torch 2.10+ saves without collectives as one __<rank>.metadata per rank: the reader merges
// them, and the sharded tensor assembles to what rank 0 saved whole with torch.save.
TEST(Checkpoint, RankLocalMetadataIsMerged)
{
    REQUIRE_FIXTURES();
    auto index = openCheckpoint(fixture("rank_local/ckpt"));
    ASSERT_TRUE(index.ok()) << index.error().toString();
    EXPECT_EQ(index->info["rank_local_metadata"], "2");
    EXPECT_TRUE(index->problems.empty()) << index->problems.front().toString();
    ASSERT_NE(index->findTensor("rank0.only"), nullptr);
    ASSERT_NE(index->findTensor("rank1.only"), nullptr);
    // Both ranks described the replicated tensor; one copy is kept, as a collective save would.
    ASSERT_NE(index->findTensor("shared"), nullptr);
    EXPECT_EQ(index->findTensor("shared")->chunks.size(), 1u);
    const TensorEntry *w = index->findTensor("w");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->chunks.size(), 2u);
    auto merged = readTensor(*index, *w);
    ASSERT_TRUE(merged.ok()) << merged.error().toString();

    auto ref = openCheckpoint(fixture("rank_local/rank_local_reference.pt"));
    ASSERT_TRUE(ref.ok()) << ref.error().toString();
    auto whole = readTensor(*ref, *ref->findTensor("w"));
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(sha256Hex(*merged), sha256Hex(*whole));
}

// Megatron-Core 0.15 pickled its own Metadata subclass with an mcore_data field.
TEST(Checkpoint, MCoreMetadataReadsLikeMetadata)
{
    REQUIRE_FIXTURES();
    auto mcore = openCheckpoint(fixture("megatron_mcore_metadata"));
    ASSERT_TRUE(mcore.ok()) << mcore.error().toString();
    auto plain = openCheckpoint(fixture("dcp_1rank"));
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(mcore->info["metadata_class"], "MCoreMetadata");
    EXPECT_EQ(mcore->info["mcore_data"], "present");
    ASSERT_EQ(mcore->tensors.size(), plain->tensors.size());
    for (size_t i = 0; i < plain->tensors.size(); ++i) {
        const TensorEntry &a = plain->tensors[i], &b = mcore->tensors[i];
        EXPECT_EQ(a.key, b.key);
        EXPECT_EQ(a.shape, b.shape);
        EXPECT_EQ(a.chunkDims, b.chunkDims);
        auto da = readTensor(*plain, a), db = readTensor(*mcore, b);
        ASSERT_TRUE(da.ok() && db.ok()) << a.key;
        EXPECT_EQ(sha256Hex(*da), sha256Hex(*db)) << a.key;
    }
}

// Past 2^18 chunks the integrity check runs on two threads: its problems come in entry order,
// one per broken key, exactly as one thread finds them (each case placed in both halves).
TEST(Checkpoint, IntegrityProblemsInEntryOrderOnTwoThreads)
{
    CheckpointIndex index;
    index.dataDir = "/nowhere";
    index.files = {"__0_0.distcp"};
    index.fileSizes = {uint64_t(1) << 30};
    index.fileKinds = {""};
    std::vector<std::string> expected;
    for (int i = 0; i < 300'000; ++i) {
        TensorEntry t;
        t.key = "t." + std::to_string(i);
        t.dtype = DType::Float32;
        t.shape = {4};
        t.chunkDims = {0, 4};
        t.chunks = {Location{0, 0, Encoding::TorchSaveArchive, uint64_t(i) * 16, 16}};
        if (i % 7919 == 3) { // outside the tensor
            t.chunkDims = {2, 4};
            expected.push_back(t.key + ": outside");
        } else if (i % 10007 == 5) { // past the end of the file
            t.chunks.edit()[0].offset = uint64_t(1) << 31;
            expected.push_back(t.key + ": past the end");
        }
        index.tensors.push_back(std::move(t));
    }
    ASSERT_GT(index.chunkCount(), 1u << 18);
    std::vector<std::string> found;
    for (const Problem &p : checkIntegrity(index))
        found.push_back(p.key + (p.message.find("outside") != std::string::npos ? ": outside"
                                 : p.message.find("past the end") != std::string::npos
                                     ? ": past the end"
                                     : ": " + p.message));
    EXPECT_EQ(found, expected);
}
