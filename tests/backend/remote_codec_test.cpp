// SPDX-License-Identifier: MIT
// The remote protocol's bytes (backend/src/remote/): frames and blobs through a pipe, the ready
// line past a login shell's chatter, and every result and index through the codec and back to
// what the same result writes here: the public JSON schemas, byte for byte.
#include "testenv.h"

#include "remote/clientcache.h"
#include "remote/codec.h"
#include "remote/wire.h"

#include <shardscope/report.h>
#include <shardscope/session.h>

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <unistd.h>

using namespace shardscope;
using namespace shardscope::detail::remote;
namespace fs = std::filesystem;

namespace {

fs::path demoDir()
{
    return fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
}

std::shared_ptr<const Layout> demoLayout()
{
    static const auto layout = [] {
        auto l = layoutFromConfig((demoDir() / "config.json").string(), {});
        EXPECT_TRUE(l) << l.error().toString();
        return std::make_shared<const Layout>(std::move(*l));
    }();
    return layout;
}

// Through the wire as the server sends a result: JSON value, MessagePack, zstd frames.
template<typename T>
T through(const T &value)
{
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    const std::string packed = toPack(toJson(value));
    std::thread writer([&] {
        FrameWriter w(p[1]);
        EXPECT_TRUE(w.controlWithBlob(3, {{"type", "result"}}, packed));
        ::close(p[1]);
    });
    FrameReader r(p[0]);
    auto control = r.next();
    EXPECT_TRUE(control);
    auto j = parseControl(control->payload);
    EXPECT_TRUE(j);
    BlobReceiver blob((*j)["blob"]["raw"].get<uint64_t>());
    std::string bytes;
    for (;;) {
        auto f = r.next();
        EXPECT_TRUE(f) << f.error().message;
        EXPECT_EQ(f->id, 3u);
        if (f->kind == FrameKind::BlobEnd) {
            auto done = blob.finish(f->payload);
            EXPECT_TRUE(done) << done.error().message;
            bytes = std::string(done->view());
            break;
        }
        EXPECT_TRUE(blob.chunk(f->payload));
    }
    writer.join();
    ::close(p[0]);
    EXPECT_EQ(bytes, packed);
    auto unpacked = fromPack(bytes);
    EXPECT_TRUE(unpacked);
    auto back = fromJson<T>(*unpacked);
    EXPECT_TRUE(back) << back.error().message;
    return std::move(*back);
}

std::string inspectAll(const std::shared_ptr<const CheckpointIndex> &index)
{
    InspectResult r;
    r.index = index;
    for (const TensorEntry &t : index->tensors)
        r.tensors.push_back({&t, std::nullopt, {}, {}});
    for (const ObjectEntry &o : index->objects)
        r.objects.push_back({&o, {}});
    r.problems = index->problems;
    return inspectToJson(r, index->inputPath);
}

} // namespace

TEST(RemoteWire, ABlobLargerThanAFrameArrivesWhole)
{
    std::string big(10 << 20, '\0'); // three chunks of noise that zstd cannot shrink
    uint64_t x = 1;
    for (char &c : big) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        c = char(x >> 56);
    }
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    std::thread writer([&] {
        FrameWriter w(p[1]);
        EXPECT_TRUE(w.controlWithBlob(9, {{"type", "result"}}, big));
        ::close(p[1]);
    });
    FrameReader r(p[0]);
    auto c = r.next();
    ASSERT_TRUE(c);
    BlobReceiver blob(big.size());
    int chunks = 0;
    for (;;) {
        auto f = r.next();
        ASSERT_TRUE(f);
        ASSERT_LE(f->payload.size(), kFrameCap);
        if (f->kind == FrameKind::BlobEnd) {
            auto got = blob.finish(f->payload);
            ASSERT_TRUE(got) << got.error().message;
            EXPECT_TRUE(got->view() == big);
            break;
        }
        ++chunks;
        ASSERT_TRUE(blob.chunk(f->payload));
    }
    writer.join();
    ::close(p[0]);
    EXPECT_GE(chunks, 3);
}

TEST(RemoteWire, ABlobThatIsNotWhatWasSentIsRefused)
{
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    {
        FrameWriter w(p[1]);
        ASSERT_TRUE(w.controlWithBlob(1, {{"type", "result"}}, std::string(1000, 'a')));
        ::close(p[1]);
    }
    FrameReader r(p[0]);
    std::vector<Frame> frames;
    while (auto f = r.next())
        frames.push_back(std::move(*f));
    ::close(p[0]);
    ASSERT_EQ(frames.size(), 3u); // the announcement, one chunk, the end
    {
        BlobReceiver shorter(999); // announced fewer bytes than it holds
        const Status s = shorter.chunk(frames[1].payload);
        EXPECT_TRUE(!s || !shorter.finish(frames[2].payload));
    }
    {
        BlobReceiver longer(1001);
        ASSERT_TRUE(longer.chunk(frames[1].payload));
        EXPECT_FALSE(longer.finish(frames[2].payload));
    }
    {
        BlobReceiver flipped(1000);
        std::string bad = frames[1].payload;
        bad.back() ^= 1;
        (void)flipped.chunk(bad);
        EXPECT_FALSE(flipped.finish(frames[2].payload)); // its checksum
    }
}

// An index's blob (minor 1): its header compressed there, then its entry's frame as it was
// kept, one zstd frame after another, frames and chunks meeting anywhere.
TEST(RemoteWire, ABlobOfSeveralFramesOneOfThemKeptArrivesWhole)
{
    std::string entry(9 << 20, '\0'); // noise: frames longer than a chunk
    uint64_t x = 7;
    for (char &c : entry) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        c = char(x >> 60); // four bits of noise a byte: zstd shrinks it, not to nothing
    }
    const std::string header(1000, 'h');
    auto receive = [](const std::function<void(FrameWriter &)> &send,
                      uint64_t announced) -> Result<std::string> {
        int p[2];
        if (::pipe(p) != 0)
            return makeError(Error::Code::Io, "pipe");
        std::thread writer([&] {
            FrameWriter w(p[1]);
            send(w);
            ::close(p[1]);
        });
        FrameReader r(p[0]);
        Result<std::string> out = makeError(Error::Code::Io, "no end");
        auto c = r.next();
        BlobReceiver blob(announced);
        Status s = Ok{};
        while (auto f = r.next()) {
            if (f->kind == FrameKind::BlobEnd) {
                auto got = blob.finish(f->payload);
                out = got ? Result<std::string>(std::string(got->view())) : got.error();
                break;
            }
            if (s)
                s = blob.chunk(f->payload);
        }
        writer.join();
        ::close(p[0]);
        if (!s)
            return s.error();
        return out;
    };
    // The first time the entry's frame is made, and kept.
    std::string kept;
    using Part = FrameWriter::Part;
    auto first = receive(
        [&](FrameWriter &w) {
            EXPECT_TRUE(
                w.controlWithFrames(1, {{"type", "index"}}, {Part{header}, Part{entry, &kept}}));
        },
        header.size() + entry.size());
    ASSERT_TRUE(first) << first.error().message;
    EXPECT_TRUE(*first == header + entry);
    ASSERT_FALSE(kept.empty());
    EXPECT_LT(kept.size(), entry.size());
    // Then sent as it was kept, behind a header compressed now, and alone.
    auto again = receive(
        [&](FrameWriter &w) {
            EXPECT_TRUE(w.controlWithFrames(2, {{"type", "index"}},
                                            {Part{header}, Part{{}, nullptr, kept, entry.size()}}));
        },
        header.size() + entry.size());
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_TRUE(*again == header + entry);
    auto alone = receive(
        [&](FrameWriter &w) {
            EXPECT_TRUE(w.controlWithFrames(3, {{"type", "entry"}},
                                            {Part{{}, nullptr, kept, entry.size()}}));
        },
        entry.size());
    ASSERT_TRUE(alone) << alone.error().message;
    EXPECT_TRUE(*alone == entry);
    // A kept frame that is not what it was said to be: refused, never a short blob.
    auto cut = receive(
        [&](FrameWriter &w) {
            (void)w.controlWithFrames(
                4, {{"type", "entry"}},
                {Part{
                    {}, nullptr, std::string_view(kept).substr(0, kept.size() / 2), entry.size()}});
        },
        entry.size());
    EXPECT_FALSE(cut);
}

TEST(RemoteWire, TheReadyLineIsFoundPastAShellsChatterAndNotForever)
{
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const std::string text = "Last login: today\nmodule: loaded\nSHARDSCOPE-SERVE 1 9.9.9\n";
    ASSERT_EQ(::write(p[1], text.data(), text.size()), ssize_t(text.size()));
    // A frame right after the line, in the same read.
    {
        FrameWriter w(p[1]);
        ASSERT_TRUE(w.control(0, {{"type", "hello"}}));
    }
    FrameReader r(p[0]);
    std::string noise;
    auto line = r.readyLine(noise);
    ASSERT_TRUE(line) << line.error().message;
    EXPECT_EQ(*line, "1 9.9.9");
    EXPECT_EQ(noise, "Last login: today\nmodule: loaded\n");
    auto hello = r.next();
    ASSERT_TRUE(hello);
    EXPECT_EQ(parseControl(hello->payload)->value("type", ""), "hello");
    ::close(p[0]);
    ::close(p[1]);

    ASSERT_EQ(::pipe(p), 0);
    // The reader gives up and closes its end while this still writes.
    const auto pipeWas = std::signal(SIGPIPE, SIG_IGN);
    std::thread chatter([fd = p[1]] {
        const std::string row(1000, 'x');
        for (int i = 0; i < 100; ++i)
            if (::write(fd, (row + "\n").data(), row.size() + 1) <= 0)
                break;
        ::close(fd);
    });
    FrameReader noisy(p[0]);
    noise.clear();
    auto none = noisy.readyLine(noise);
    ASSERT_FALSE(none);
    EXPECT_NE(none.error().message.find("no ShardScope server answered"), std::string::npos);
    ::close(p[0]);
    chatter.join();
    std::signal(SIGPIPE, pipeWas);
}

TEST(RemoteWire, FramesOfUnknownKindsOrSizesAreRefused)
{
    for (const std::string &head :
         {std::string("\0\0\0\1\7\0\0\0\0x", 10), std::string("\xff\xff\xff\xff\0\0\0\0\0", 9)}) {
        int p[2];
        ASSERT_EQ(::pipe(p), 0);
        ASSERT_EQ(::write(p[1], head.data(), head.size()), ssize_t(head.size()));
        ::close(p[1]);
        FrameReader r(p[0]);
        EXPECT_FALSE(r.next());
        ::close(p[0]);
    }
}

TEST(RemoteCodec, EveryFormatsIndexTravelsWhole)
{
    std::vector<std::string> paths = {demoDir().string()};
    for (const char *f :
         {"dcp_2ranks", "dcp_zstd", "torchsave/model.pt", "torchsave_legacy/model.pt",
          "safetensors/model.safetensors", "safetensors_sharded", "megatron_legacy",
          "megatron_torch_dist", "megatron_fsdp_dtensor"})
        if (fs::exists(fs::path(fixturesDir()) / f))
            paths.push_back((fs::path(fixturesDir()) / f).string());
    for (const std::string &path : paths) {
        auto opened = openCheckpoint(path);
        ASSERT_TRUE(opened) << path << ": " << opened.error().toString();
        auto index = std::make_shared<const CheckpointIndex>(std::move(*opened));
        auto back = decodeIndexBlob(encodeIndexBlob(*index), path, 2);
        ASSERT_TRUE(back) << path << ": " << back.error().toString();
        EXPECT_EQ(inspectAll(*back), inspectAll(index)) << path;
        EXPECT_EQ((*back)->format, index->format);
        EXPECT_EQ((*back)->inputPath, index->inputPath);
        EXPECT_EQ((*back)->fileKinds, index->fileKinds);
        EXPECT_EQ((*back)->transformChains, index->transformChains);
        for (size_t i = 0; i < index->tensors.size(); ++i) {
            EXPECT_EQ((*back)->tensors[i].path, index->tensors[i].path);
            EXPECT_EQ((*back)->tensors[i].strides, index->tensors[i].strides);
            EXPECT_EQ((*back)->tensors[i].storageOffset, index->tensors[i].storageOffset);
        }
    }
}

TEST(RemoteCodec, AnIndexBlobCutOrForgedIsAnError)
{
    auto opened = openCheckpoint(demoDir().string());
    ASSERT_TRUE(opened);
    const std::string blob = encodeIndexBlob(*opened);
    EXPECT_FALSE(decodeIndexBlob(blob.substr(0, blob.size() / 2), "x"));
    EXPECT_FALSE(decodeIndexBlob(blob.substr(0, 3), "x"));
    std::string forged = blob;
    forged[forged.size() - 100] ^= 0x55; // past the header: the entry's checksum sees it
    EXPECT_FALSE(decodeIndexBlob(forged, "x"));
}

// A reopen: the client opens the index it kept as a local open from the persistent index opens
// its entry, viewing the mapped file (nothing copied), and never trusts one that does not check.
TEST(RemoteClientCache, AKeptIndexIsViewedInItsFileAndACorruptOneIsNotTrusted)
{
    const fs::path dir =
        fs::path(::testing::TempDir()) / ("clientcache-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    ::setenv("SHARDSCOPE_CACHE_DIR", dir.c_str(), 1);
    auto opened = openCheckpoint(demoDir().string());
    ASSERT_TRUE(opened) << opened.error().toString();
    const auto here = std::make_shared<const CheckpointIndex>(std::move(*opened));
    const IndexBlob blob = indexBlob(*here);
    RemoteTarget target;
    target.host = "cluster";
    const std::string origin = here->inputPath;
    const ClientIndexCache cache(target, origin);
    ASSERT_TRUE(cache.enabled());
    cache.store(blob.identity, blob.header, blob.entry, blob.keep);
    waitForClientCacheWrites();
    ASSERT_EQ(cache.identities(), std::vector<std::string>{blob.identity});

    std::string header;
    auto index = cache.open(blob.identity, origin, &header);
    ASSERT_TRUE(index) << index.error().toString();
    EXPECT_EQ(header, blob.header);
    auto kept = cache.kept(blob.identity);
    ASSERT_TRUE(kept) << kept.error().toString();
    const std::span<const uint8_t> mapped = kept->file->bytes();
    auto inFile = [&](const void *p) {
        const auto *b = static_cast<const uint8_t *>(p);
        return b >= mapped.data() && b < mapped.data() + mapped.size();
    };
    ASSERT_FALSE((*index)->tensors.empty());
    size_t viewed = 0;
    for (const TensorEntry &t : (*index)->tensors)
        viewed += inFile(t.key.data()) && (t.shape.empty() || inFile(t.shape.data())) &&
                  (t.chunks.empty() || inFile(t.chunks.data()));
    EXPECT_EQ(viewed, (*index)->tensors.size()) << "tensors whose keys, shapes and chunks are "
                                                   "the kept file's bytes, not copies";
    ASSERT_TRUE(applyIndexHeader(header, **index, origin));
    EXPECT_EQ(inspectAll(*index), inspectAll(here));

    // Corrupt, as a torn write or another program would leave it (a new file, renamed over):
    // a byte of its entry, then of its header. Not trusted: NotFound (the client asks the
    // server for the whole index), and the file let go.
    const fs::path file = kept->file->path();
    std::string bytes;
    {
        std::ifstream in(file, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    for (size_t at : {bytes.size() - 100, size_t(30)}) {
        std::string bad = bytes;
        bad[at] ^= 0x55;
        const fs::path tmp = dir / "torn";
        std::ofstream(tmp, std::ios::binary) << bad;
        fs::rename(tmp, file);
        auto corrupt = cache.open(blob.identity, origin);
        ASSERT_FALSE(corrupt) << "byte " << at;
        EXPECT_EQ(corrupt.error().code, Error::Code::NotFound) << corrupt.error().toString();
        EXPECT_FALSE(fs::exists(file)) << "byte " << at;
        EXPECT_TRUE(cache.identities().empty());
    }
    ::unsetenv("SHARDSCOPE_CACHE_DIR");
    fs::remove_all(dir);
}

TEST(RemoteCodec, ResultsTravelWholeAndWriteTheirSchemasAsHere)
{
    const std::string demo = demoDir().string();
    DiffRequest d{demo, "layout.json", {}, nullptr, demoLayout(), {}};
    d.options.disabledRules = {"mla_down_proj"};
    d.options.previewRepair = true;
    auto diff = runDiff(d);
    ASSERT_TRUE(diff);
    const DiffResult dback = through(*diff);
    EXPECT_EQ(diffToJson(dback), diffToJson(*diff));
    EXPECT_EQ(toJson(dback), toJson(*diff)); // every field, the schema's and the rest
    EXPECT_EQ(renderReport(dback, ReportFormat::Html, {}),
              renderReport(*diff, ReportFormat::Html, {}));

    VerifyRequest v;
    v.checkpoint = demo;
    v.layout = "layout.json";
    v.openedLayout = demoLayout();
    v.dp = 2;
    v.threads = 1;
    auto report = runVerify(v);
    ASSERT_TRUE(report) << report.error().toString();
    const VerifyReport vback = through(*report);
    EXPECT_EQ(verifyToJson(vback), verifyToJson(*report));
    EXPECT_EQ(toJson(vback), toJson(*report)); // the plan too
    ASSERT_TRUE(vback.plan);
    // What a launched job prints, read back, prints the same.
    auto schema = verifyFromSchema(verifyToJson(*report));
    ASSERT_TRUE(schema) << schema.error().message;
    EXPECT_EQ(verifyToJson(*schema), verifyToJson(*report));

    auto values = runValueDiff({demo, demo});
    ASSERT_TRUE(values) << values.error().toString();
    const ValueDiffResult valBack = through(*values);
    EXPECT_EQ(valueDiffToJson(valBack), valueDiffToJson(*values));
    EXPECT_EQ(renderValueDiffText(valBack), renderValueDiffText(*values));

    const fs::path out =
        fs::temp_directory_path() / ("ss-remote-codec-fix-" + std::to_string(::getpid()));
    fs::remove_all(out);
    FixRequest f;
    f.checkpoint = demo;
    f.layout = "layout.json";
    f.openedLayout = demoLayout();
    f.output = out.string();
    f.options.disabledRules = {"mla_down_proj"};
    auto fixed = runFix(f);
    fs::remove_all(out);
    ASSERT_TRUE(fixed) << fixed.error().toString();
    const FixResult fback = through(*fixed);
    EXPECT_EQ(fixToJson(fback), fixToJson(*fixed));
    EXPECT_TRUE(fback.repaired());
}

TEST(RemoteCodec, BytesAndNumbersNoJsonTextCouldHold)
{
    ValueDiffResult r;
    TensorValueDiff t;
    t.name = std::string("layer.\xff\xfe.weight\x1b[31m", 20); // not UTF-8, a terminal escape
    t.maxRel = std::numeric_limits<double>::infinity();
    t.meanAbs = std::nan("");
    t.a.min = -0.0;
    r.tensors.push_back(t);
    const ValueDiffResult back = through(r);
    EXPECT_EQ(back.tensors[0].name, t.name);
    EXPECT_TRUE(std::isinf(back.tensors[0].maxRel));
    EXPECT_TRUE(std::isnan(back.tensors[0].meanAbs));
    EXPECT_TRUE(std::signbit(back.tensors[0].a.min));
}

TEST(RemoteCodec, AValueThisBuildDoesNotKnowIsAnErrorNotAGuess)
{
    json j = toJson(DiffResult{});
    j["entries"] = json::array({json{{"status", 250}}});
    auto r = fromJson<DiffResult>(j);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("unknown to this build"), std::string::npos)
        << r.error().message;
    // A field a newer build adds, or an older one lacks: the others are read, the rest default.
    CheckpointDiff diff;
    diff.first = "a";
    diff.second = "b";
    diff.same = 3;
    json older = toJson(diff);
    older.erase("same");
    older["added_later"] = 1;
    auto c = fromJson<CheckpointDiff>(older);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->first, "a");
    EXPECT_EQ(c->same, 0u);
}

TEST(RemoteCodec, ALayoutWrittenForALaunchedJobReadsBackTheSame)
{
    const Layout &layout = *demoLayout();
    auto back = layoutFromJson(layoutToJson(layout), "job.json");
    ASSERT_TRUE(back) << back.error().toString();
    json a = toJson(layout), b = toJson(*back);
    a.erase("source"); // where it came from: the file the job reads
    b.erase("source");
    EXPECT_EQ(a, b);
}
