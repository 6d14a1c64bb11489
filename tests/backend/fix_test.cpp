// SPDX-License-Identifier: MIT
// The repair's metadata writer against our own reader: every DCP checkpoint real torch wrote for
// the tests, written back from its index, reads back as the same index (torch's own reading of
// it is checked by tools/check_fix.py); the pickle streamed to a file in pieces is the one made
// whole; the torch.save archives of rewritten keys read back as written.
#include "fix/metadatawriter.h"
#include "fix/tensorarchive.h"
#include "read/torchsave.h"
#include "testenv.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace shardscope;
using namespace shardscope::detail;
namespace fs = std::filesystem;

namespace {

const char *const kFixtures[] = {"dcp_1rank", "dcp_2ranks", "dcp_4ranks", "dcp_zstd",
                                 "megatron_fsdp_dtensor"};

std::string fileOf(const CheckpointIndex &index, const Location &l)
{
    return l.file < index.files.size() ? index.files[l.file] : "?";
}

} // namespace

TEST(MetadataWriter, EveryDcpFixtureReadsBackAsTheSameIndex)
{
    for (const char *name : kFixtures) {
        SCOPED_TRACE(name);
        const fs::path src = fs::path(fixturesDir()) / name;
        auto a = openCheckpoint(src.string());
        ASSERT_TRUE(a) << a.error().toString();
        ASSERT_FALSE(a->tensors.empty());
        const fs::path dir =
            fs::temp_directory_path() / ("ss-metadata-writer-" + std::string(name));
        fs::remove_all(dir);
        fs::create_directories(dir);
        for (const std::string &f : a->files)
            fs::create_symlink(fs::absolute(fs::path(a->dataDir) / f), dir / f);
        std::ofstream(dir / ".metadata", std::ios::binary) << dcpMetadataPickle(*a);
        auto b = openCheckpoint(dir.string());
        ASSERT_TRUE(b) << b.error().toString();
        EXPECT_EQ(b->format, a->format);
        EXPECT_TRUE(b->problems.empty());
        ASSERT_EQ(a->tensors.size(), b->tensors.size());
        for (size_t i = 0; i < a->tensors.size(); ++i) {
            const TensorEntry &x = a->tensors[i], &y = b->tensors[i];
            SCOPED_TRACE(x.key);
            EXPECT_EQ(x.key, y.key);
            EXPECT_EQ(x.dtypeName, y.dtypeName);
            EXPECT_EQ(x.shape, y.shape);
            EXPECT_EQ(x.chunkDims, y.chunkDims);
            EXPECT_EQ(x.path.parts(x.key), y.path.parts(y.key));
            ASSERT_EQ(x.chunks.size(), y.chunks.size());
            for (size_t c = 0; c < x.chunks.size(); ++c) {
                EXPECT_EQ(fileOf(*a, x.chunks[c]), fileOf(*b, y.chunks[c]));
                EXPECT_EQ(x.chunks[c].offset, y.chunks[c].offset);
                EXPECT_EQ(x.chunks[c].length, y.chunks[c].length);
                EXPECT_EQ(a->transformChains.at(x.chunks[c].transforms),
                          b->transformChains.at(y.chunks[c].transforms));
            }
        }
        size_t stored = 0;
        for (const ObjectEntry &x : a->objects) {
            if (!x.location)
                continue;
            ++stored;
            const ObjectEntry *y = b->findObject(x.key);
            ASSERT_NE(y, nullptr) << x.key;
            ASSERT_TRUE(y->location.has_value());
            EXPECT_EQ(fileOf(*a, *x.location), fileOf(*b, *y->location));
            EXPECT_EQ(x.location->offset, y->location->offset);
            EXPECT_EQ(x.location->length, y->location->length);
            EXPECT_EQ(x.path.parts(x.key), y->path.parts(y->key));
        }
        EXPECT_EQ(b->objects.size(), stored);
        fs::remove_all(dir);
    }
}

TEST(MetadataWriter, StreamedInPiecesIsTheWholePickle)
{
    auto index = openCheckpoint((fs::path(fixturesDir()) / "dcp_4ranks").string());
    ASSERT_TRUE(index) << index.error().toString();
    const std::string whole = dcpMetadataPickle(*index);
    const fs::path path = fs::temp_directory_path() / "ss-metadata-streamed";
    for (size_t piece : {size_t(64), size_t(4096), size_t(16) << 20}) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        auto written = writeDcpMetadata(*index, fd, path.string(), piece);
        ::close(fd);
        ASSERT_TRUE(written) << written.error().toString();
        EXPECT_EQ(*written, whole.size());
        std::ifstream in(path, std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        EXPECT_TRUE(s.str() == whole) << "piece " << piece;
    }
    fs::remove(path);
}

// The archives the rewrite writes, read back by our own torch.save decoder (torch.load's reading
// of them is checked by tools/check_fix.py, float8 included): every dtype, a scalar and an empty
// tensor; the length does not depend on the checksum, so offsets are placed before the data.
TEST(TensorArchive, EveryDtypeReadsBackAsWritten)
{
    const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {}, {0, 4}, {2, 3, 70000}};
    for (int d = int(DType::Float64); d <= int(DType::Float4E2M1FNx2); ++d) {
        const DType dtype = DType(d);
        if (elementSize(dtype) == 0)
            continue;
        for (const auto &shape : shapes) {
            SCOPED_TRACE(std::string(dtypeName(dtype)) + " of " + std::to_string(shape.size()) +
                         " dims");
            uint64_t n = uint64_t(elementSize(dtype));
            for (int64_t s : shape)
                n *= uint64_t(s);
            std::vector<std::byte> data(n);
            for (size_t i = 0; i < n; ++i)
                data[i] = std::byte((i * 131 + 7) & 0xff);
            const TensorArchive sized = tensorArchive(dtype, shape, 0);
            const TensorArchive a = tensorArchive(dtype, shape, crc32(data));
            ASSERT_EQ(sized.size(n), a.size(n));
            std::vector<uint8_t> file;
            file.insert(file.end(), a.head.begin(), a.head.end());
            const auto *p = reinterpret_cast<const uint8_t *>(data.data());
            file.insert(file.end(), p, p + n);
            file.insert(file.end(), a.tail.begin(), a.tail.end());
            ASSERT_EQ(file.size(), a.size(n));
            auto payload = TorchSavePayload::open(file);
            ASSERT_TRUE(payload) << payload.error().toString();
            auto spec = payload->tensorSpec(payload->root());
            ASSERT_TRUE(spec) << spec.error().toString();
            EXPECT_EQ(spec->dtype, dtype);
            EXPECT_EQ(spec->shape, shape);
            EXPECT_EQ(spec->storageOffset, 0);
            // 64-byte aligned, as torch aligns its records, and the bytes as written.
            EXPECT_EQ(spec->recordOffset % 64, 0u);
            ASSERT_LE(spec->recordOffset + n, file.size());
            if (n) { // an empty tensor's data() may be null: memcmp must not see it
                EXPECT_EQ(std::memcmp(file.data() + spec->recordOffset, data.data(), n), 0);
            }
        }
    }
}

TEST(TensorArchive, Crc32IsZipsChecksum)
{
    // The check value of CRC-32/ISO-HDLC, and a continued checksum equals the whole one.
    const std::string s = "123456789";
    const auto bytes = std::as_bytes(std::span(s.data(), s.size()));
    EXPECT_EQ(crc32(bytes), 0xcbf43926u);
    EXPECT_EQ(crc32(bytes.subspan(4), crc32(bytes.first(4))), 0xcbf43926u);
}
