// SPDX-License-Identifier: MIT
// The persistent index's bytes: CheckpointIndex → cache file → CheckpointIndex.
#include "read/indexcodec.h"

#include "read/readers.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <sys/mman.h>
#include <thread>
#include <xxhash.h>

namespace shardscope::detail {

static_assert(std::endian::native == std::endian::little, "the cache stores native integers");
// Chunk locations are stored as the struct is laid out, and copied back as they are.
static_assert(sizeof(Location) == 24 && offsetof(Location, file) == 0 &&
              offsetof(Location, transforms) == 4 && offsetof(Location, encoding) == 6 &&
              offsetof(Location, offset) == 8 && offsetof(Location, length) == 16);

namespace {

constexpr char kMagic[8] = {'S', 'S', 'I', 'N', 'D', 'E', 'X', '\n'};
constexpr size_t kHeaderSize = 40;
constexpr uint32_t kMaxString = 1u << 30;
constexpr uint32_t kMaxDims = 1024; // a record with more is refused (and decoded anew)

struct TensorRecord
{
    uint64_t keyOffset;
    uint32_t keyLength, ndim;
    uint64_t dims; ///< shape, then 2 × ndim per chunk, then the strides
    uint64_t firstChunk;
    uint32_t chunkCount, strideCount;
    int64_t storageOffset;
    uint64_t pathDots;
    uint32_t firstPart, partCount; ///< explicit path components, in the parts pool
    uint32_t dtypeName, reserved;
};
static_assert(sizeof(TensorRecord) == 72);

struct ObjectRecord
{
    uint64_t keyOffset;
    uint32_t keyLength, hasLocation;
    uint64_t pathDots;
    uint32_t firstPart, partCount;
    Location location;
};
static_assert(sizeof(ObjectRecord) == 56);

class Writer
{
public:
    HotVector<char> out;
    void bytes(const void *data, size_t n)
    {
        const char *p = static_cast<const char *>(data);
        out.append(p, p + n);
    }
    template<typename T>
    void put(const T &v)
    {
        bytes(&v, sizeof v);
    }
    void str(std::string_view s)
    {
        put(uint32_t(s.size()));
        bytes(s.data(), s.size());
    }
    void align() { out.resizeZeroed((out.size() + 7) & ~size_t(7)); }
};

class Reader
{
public:
    Reader(std::span<const uint8_t> bytes, size_t at, const std::string &path)
        : m_bytes(bytes)
        , m_at(at)
        , m_path(path)
    {}
    size_t at() const { return m_at; }
    size_t left() const { return m_bytes.size() - m_at; }
    Error fail(std::string msg, size_t at) const
    {
        return makeError(Error::Code::Format, "index cache: " + std::move(msg))
            .inFile(m_path)
            .atOffset(at);
    }
    template<typename T>
    bool get(T &v)
    {
        if (left() < sizeof v)
            return false;
        std::memcpy(&v, m_bytes.data() + m_at, sizeof v);
        m_at += sizeof v;
        return true;
    }
    bool str(std::string &s)
    {
        uint32_t n = 0;
        if (!get(n) || n > left())
            return false;
        s.assign(reinterpret_cast<const char *>(m_bytes.data() + m_at), n);
        m_at += n;
        return true;
    }
    bool align()
    {
        const size_t to = (m_at + 7) & ~size_t(7);
        if (to > m_bytes.size())
            return false;
        m_at = to;
        return true;
    }
    /** `count` items of `size` bytes, after checking they are there. */
    bool span(uint64_t count, size_t size, const uint8_t *&data)
    {
        if (count > left() / size)
            return false;
        data = m_bytes.data() + m_at;
        m_at += size_t(count) * size;
        return true;
    }
    /** A count of items that each take at least `minSize` bytes: never more than fit. */
    bool count(uint64_t &n, size_t minSize) { return get(n) && n <= left() / minSize; }

private:
    std::span<const uint8_t> m_bytes;
    size_t m_at;
    const std::string &m_path;
};

bool validLocation(const Location &l, size_t files, size_t chains)
{
    return (l.file == kUnassigned || l.file < files) && l.transforms < chains &&
           (l.encoding == Encoding::TorchSaveArchive || l.encoding == Encoding::RawStorage);
}

} // namespace

namespace {

// The checksum: XXH3 of the key, then of each 4 MiB block of the body's own XXH3, so that the
// blocks can be hashed on every core; the same value for any thread count.
constexpr size_t kBlock = 4 << 20;

template<typename Fn>
void parallelFor(size_t workers, Fn &&fn)
{
    std::vector<std::thread> pool;
    for (size_t w = 1; w < workers; ++w)
        pool.emplace_back(fn, w);
    fn(size_t(0));
    for (std::thread &t : pool)
        t.join();
}

size_t workerCount(int threads, uint64_t work)
{
    const size_t cores =
        threads > 0 ? size_t(threads) : size_t(std::max(1u, std::thread::hardware_concurrency()));
    return std::clamp<size_t>(cores, 1, std::max<uint64_t>(1, work / 4096));
}

// Hundreds of megabytes of entries (or of an entry's bytes): their pages are faulted in by the
// kernel on every core (MADV_POPULATE_WRITE, Linux 5.14) before the one thread that writes
// them does, a page at a time.
void populate(const void *data, size_t bytes, size_t workers)
{
#ifdef MADV_POPULATE_WRITE
    const size_t page = 4096;
    if (bytes < (8 << 20))
        return;
    const uintptr_t from = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
    const uintptr_t to = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(page - 1);
    parallelFor(workers, [&](size_t w) {
        const uintptr_t a = from + (to - from) / page * w / workers * page;
        const uintptr_t b = from + (to - from) / page * (w + 1) / workers * page;
        if (b > a)
            ::madvise(reinterpret_cast<void *>(a), b - a, MADV_POPULATE_WRITE);
    });
#else
    (void)data, (void)bytes, (void)workers;
#endif
}

template<typename T>
void reserveFaulted(std::vector<T> &v, size_t n, size_t workers)
{
    v.reserve(n);
    populate(v.data(), n * sizeof(T), workers);
}

uint64_t checksum(std::span<const uint8_t> key, std::span<const uint8_t> body, int threads)
{
    const size_t blocks = (body.size() + kBlock - 1) / kBlock;
    std::vector<uint64_t> hashes(blocks + 1);
    hashes[0] = XXH3_64bits(key.data(), key.size());
    const size_t workers = std::min(workerCount(threads, UINT64_MAX), std::max<size_t>(blocks, 1));
    parallelFor(workers, [&](size_t w) {
        for (size_t b = w; b < blocks; b += workers) {
            const size_t at = b * kBlock;
            hashes[b + 1] = XXH3_64bits(body.data() + at, std::min(kBlock, body.size() - at));
        }
    });
    return XXH3_64bits(hashes.data(), hashes.size() * sizeof(uint64_t));
}

} // namespace

std::string encodeIndex(const IndexCacheKey &key, const CheckpointIndex &index,
                        const std::vector<std::string> &infoKeys)
{
    const HotVector<char> bytes = encodeIndex(key, index, infoKeys, {});
    return std::string(bytes.data(), bytes.size());
}

HotVector<char> encodeIndex(const IndexCacheKey &key, const CheckpointIndex &index,
                            const std::vector<std::string> &infoKeys, HotVector<char> scratch)
{
    Writer w; // the whole file: the header is filled in last
    w.out = std::move(scratch);
    size_t keyBytes = 0, dims = 0, chunks = 0;
    for (const TensorEntry &t : index.tensors) {
        keyBytes += t.key.size() + 1;
        dims += t.shape.size() + t.chunkDims.size() + t.strides.size();
        chunks += t.chunks.size();
    }
    for (const ObjectEntry &o : index.objects)
        keyBytes += o.key.size() + 1;
    const size_t expected = keyBytes + 8 * dims + 24 * chunks +
                            sizeof(TensorRecord) * index.tensors.size() +
                            sizeof(ObjectRecord) * index.objects.size() + (1 << 16);
    w.out.reserve(expected);
    // Pages of a scratch block that are mapped already cost little here.
    populate(w.out.data(), expected, workerCount(0, UINT64_MAX));
    w.out.resizeZeroed(kHeaderSize);
    w.str(key.build);
    w.str(key.directory);
    w.put(uint32_t(key.files.size()));
    for (const FileSignature &f : key.files) {
        w.str(f.name);
        w.put(f.device);
        w.put(f.inode);
        w.put(f.size);
        w.put(f.mtimeNs);
        w.put(f.ctimeNs);
        w.put(f.sampleHash);
    }
    w.align();
    const size_t bodyAt = w.out.size();

    std::vector<std::pair<std::string, std::string>> info;
    for (const std::string &name : infoKeys)
        if (auto it = index.info.find(name); it != index.info.end())
            info.emplace_back(*it);
    w.put(uint32_t(info.size()));
    for (const auto &[name, value] : info) {
        w.str(name);
        w.str(value);
    }
    w.put(uint32_t(index.files.size()));
    for (const std::string &f : index.files)
        w.str(f);
    w.put(uint32_t(index.transformChains.size()));
    for (const auto &chain : index.transformChains) {
        w.put(uint32_t(chain.size()));
        for (const std::string &s : chain)
            w.str(s);
    }
    w.put(uint64_t(index.problems.size()));
    for (const Problem &p : index.problems) {
        w.str(p.key);
        w.str(p.file);
        w.put(uint8_t(p.offset.has_value()));
        w.put(p.offset.value_or(0));
        w.str(p.message);
        w.put(uint8_t(p.effect));
    }

    // Entries: pools first, fixed-size records last, so that each record can be read alone.
    std::vector<std::string> dtypeNames;
    std::vector<TensorRecord> tensors(index.tensors.size());
    std::vector<ObjectRecord> objects(index.objects.size());
    uint64_t keyAt = 0, dimAt = 0, chunkAt = 0, partAt = 0;
    std::vector<const std::string *> parts;
    auto path = [&](const KeyPath &kp, uint64_t &dots, uint32_t &first, uint32_t &count) {
        dots = kp.dotMask();
        first = uint32_t(partAt);
        count = uint32_t(kp.explicitParts().size());
        partAt += count;
        for (const std::string &s : kp.explicitParts())
            parts.push_back(&s);
    };
    for (size_t i = 0; i < index.tensors.size(); ++i) {
        const TensorEntry &t = index.tensors[i];
        TensorRecord &r = tensors[i];
        std::memset(&r, 0, sizeof r);
        r.keyOffset = keyAt;
        r.keyLength = uint32_t(t.key.size());
        keyAt += t.key.size() + 1;
        r.ndim = uint32_t(t.shape.size());
        r.dims = dimAt;
        dimAt += t.shape.size() + t.chunkDims.size() + t.strides.size();
        r.firstChunk = chunkAt;
        r.chunkCount = uint32_t(t.chunks.size());
        chunkAt += t.chunks.size();
        r.strideCount = uint32_t(t.strides.size());
        r.storageOffset = t.storageOffset;
        path(t.path, r.pathDots, r.firstPart, r.partCount);
        auto it = std::find(dtypeNames.begin(), dtypeNames.end(), t.dtypeName);
        r.dtypeName = uint32_t(it - dtypeNames.begin());
        if (it == dtypeNames.end())
            dtypeNames.push_back(t.dtypeName);
    }
    for (size_t i = 0; i < index.objects.size(); ++i) {
        const ObjectEntry &o = index.objects[i];
        ObjectRecord &r = objects[i];
        std::memset(static_cast<void *>(&r), 0, sizeof r);
        r.keyOffset = keyAt;
        r.keyLength = uint32_t(o.key.size());
        keyAt += o.key.size() + 1;
        path(o.path, r.pathDots, r.firstPart, r.partCount);
        r.hasLocation = o.location.has_value();
        if (o.location) {
            r.location.file = o.location->file;
            r.location.transforms = o.location->transforms;
            r.location.encoding = o.location->encoding;
            r.location.offset = o.location->offset;
            r.location.length = o.location->length;
        }
    }
    w.put(uint64_t(index.tensors.size()));
    w.put(uint64_t(index.objects.size()));
    w.put(uint32_t(dtypeNames.size()));
    for (const std::string &s : dtypeNames)
        w.str(s);
    w.put(uint64_t(parts.size()));
    for (const std::string *s : parts)
        w.str(*s);
    w.put(keyAt);
    // The pools are the bulk of the file: laid out first, then filled on every core, each
    // worker its own range of entries (every record says where its bytes go). Each key is
    // NUL-terminated, so that an entry can view it (CompactString::c_str()); the resize zeroes
    // the terminators, the alignment and the locations' padding.
    const size_t keysAt = w.out.size();
    const size_t dimCountAt = (keysAt + keyAt + 7) & ~size_t(7);
    const size_t dimsAt = dimCountAt + sizeof(uint64_t);
    const size_t chunkCountAt = dimsAt + dimAt * sizeof(int64_t);
    const size_t chunksAt = chunkCountAt + sizeof(uint64_t);
    w.out.resizeZeroed(chunksAt + chunkAt * sizeof(Location));
    std::memcpy(w.out.data() + dimCountAt, &dimAt, sizeof dimAt);
    std::memcpy(w.out.data() + chunkCountAt, &chunkAt, sizeof chunkAt);
    const size_t workers = workerCount(0, chunkAt + index.tensors.size() + index.objects.size());
    parallelFor(workers, [&](size_t worker) {
        char *out = w.out.data();
        auto range = [&](size_t n) {
            return std::pair(n * worker / workers, n * (worker + 1) / workers);
        };
        const auto [t0, t1] = range(index.tensors.size());
        for (size_t i = t0; i < t1; ++i) {
            const TensorEntry &t = index.tensors[i];
            const TensorRecord &r = tensors[i];
            std::memcpy(out + keysAt + r.keyOffset, t.key.data(), t.key.size());
            char *d = out + dimsAt + r.dims * sizeof(int64_t);
            for (std::span<const int64_t> v :
                 {std::span<const int64_t>(t.shape), std::span<const int64_t>(t.chunkDims),
                  std::span<const int64_t>(t.strides)}) {
                if (!v.empty()) // (an empty one may have no data pointer at all)
                    std::memcpy(d, v.data(), v.size_bytes());
                d += v.size_bytes();
            }
            char *c = out + chunksAt + r.firstChunk * sizeof(Location);
            for (const Location &l : t.chunks) {
                Location copy; // zeroed padding: the same index always gives the same bytes
                std::memset(static_cast<void *>(&copy), 0, sizeof copy);
                copy.file = l.file;
                copy.transforms = l.transforms;
                copy.encoding = l.encoding;
                copy.offset = l.offset;
                copy.length = l.length;
                std::memcpy(c, &copy, sizeof copy);
                c += sizeof copy;
            }
        }
        const auto [o0, o1] = range(index.objects.size());
        for (size_t i = o0; i < o1; ++i)
            std::memcpy(out + keysAt + objects[i].keyOffset, index.objects[i].key.data(),
                        index.objects[i].key.size());
    });
    w.bytes(tensors.data(), tensors.size() * sizeof(TensorRecord));
    w.bytes(objects.data(), objects.size() * sizeof(ObjectRecord));

    Writer h;
    h.put(kIndexCacheSchema);
    h.put(uint32_t(0));
    h.put(uint64_t(bodyAt - kHeaderSize));
    h.put(uint64_t(w.out.size() - bodyAt));
    const auto *all = reinterpret_cast<const uint8_t *>(w.out.data());
    h.put(checksum({all + kHeaderSize, bodyAt - kHeaderSize}, {all + bodyAt, w.out.size() - bodyAt},
                   0));
    std::memcpy(w.out.data(), kMagic, sizeof kMagic);
    std::memcpy(w.out.data() + sizeof kMagic, h.out.data(), h.out.size());
    return std::move(w.out);
}

namespace {

struct Header
{
    uint32_t schema = 0;
    uint64_t keyBytes = 0, bodyBytes = 0, hash = 0;
};

Result<Header> readHeader(std::span<const uint8_t> bytes, const std::string &path)
{
    Reader r(bytes, sizeof kMagic, path);
    if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
        return r.fail("not a ShardScope index file", 0);
    Header h;
    uint32_t flags = 0;
    r.get(h.schema);
    r.get(flags);
    r.get(h.keyBytes);
    r.get(h.bodyBytes);
    r.get(h.hash);
    if (h.schema != kIndexCacheSchema)
        return r.fail("schema " + std::to_string(h.schema) + ", this build reads " +
                          std::to_string(kIndexCacheSchema),
                      8);
    const uint64_t rest = bytes.size() - kHeaderSize;
    if (h.keyBytes > rest || h.bodyBytes != rest - h.keyBytes)
        return r.fail("sections of " + std::to_string(h.keyBytes) + " + " +
                          std::to_string(h.bodyBytes) + " bytes in a file of " +
                          std::to_string(bytes.size()),
                      16);
    return h;
}

} // namespace

uint64_t storedIndexChecksum(std::span<const uint8_t> bytes)
{
    uint64_t sum = 0;
    if (bytes.size() >= kHeaderSize)
        std::memcpy(&sum, bytes.data() + 32, sizeof sum);
    return sum;
}

uint64_t indexChecksum(std::span<const uint8_t> bytes)
{
    uint64_t keyBytes = 0;
    if (bytes.size() < kHeaderSize)
        return 0;
    std::memcpy(&keyBytes, bytes.data() + 16, sizeof keyBytes);
    const uint64_t rest = bytes.size() - kHeaderSize;
    keyBytes = std::min(keyBytes, rest);
    return checksum(bytes.subspan(kHeaderSize, keyBytes), bytes.subspan(kHeaderSize + keyBytes), 0);
}

Result<IndexCacheKey> decodeIndexKey(std::span<const uint8_t> bytes, const std::string &path)
{
    auto h = readHeader(bytes, path);
    if (!h)
        return h.error();
    Reader r(bytes.first(kHeaderSize + h->keyBytes), kHeaderSize, path);
    IndexCacheKey key;
    uint32_t n = 0;
    if (!r.str(key.build) || !r.str(key.directory) || !r.get(n) || n > r.left() / 52)
        return r.fail("key cut short", r.at());
    key.files.resize(n);
    for (FileSignature &f : key.files)
        if (!r.str(f.name) || !r.get(f.device) || !r.get(f.inode) || !r.get(f.size) ||
            !r.get(f.mtimeNs) || !r.get(f.ctimeNs) || !r.get(f.sampleHash))
            return r.fail("key cut short", r.at());
    return key;
}

Result<IndexEntryCounts> indexEntryCounts(std::span<const uint8_t> bytes, const std::string &path)
{
    auto h = readHeader(bytes, path);
    if (!h)
        return h.error();
    // The sections before the records, walked as decodeIndexBody reads them (not checksummed:
    // the decoder checks the whole before anything is used).
    Reader r(bytes, kHeaderSize + h->keyBytes, path);
    auto cut = [&] { return r.fail("entry cut short", r.at()); };
    IndexEntryCounts n;
    uint32_t n32 = 0;
    std::string s;
    if (!r.get(n32))
        return cut();
    for (uint32_t i = 0; i < n32; ++i)
        if (!r.str(s) || !r.str(s))
            return cut();
    if (!r.get(n32))
        return cut();
    n.files = n32;
    for (uint32_t i = 0; i < n32; ++i)
        if (!r.str(s))
            return cut();
    if (!r.get(n32))
        return cut();
    n.transformChains = n32;
    for (uint64_t c = 0; c < n.transformChains; ++c) {
        if (!r.get(n32))
            return cut();
        for (uint32_t i = 0; i < n32; ++i)
            if (!r.str(s))
                return cut();
    }
    if (!r.count(n.problems, 19))
        return cut();
    for (uint64_t p = 0; p < n.problems; ++p) {
        uint8_t flag = 0;
        uint64_t offset = 0;
        if (!r.str(s) || !r.str(s) || !r.get(flag) || !r.get(offset) || !r.str(s) || !r.get(flag))
            return cut();
    }
    if (!r.get(n.tensors) || !r.get(n.objects))
        return cut();
    return n;
}

Status decodeIndexBody(std::span<const uint8_t> bytes, const std::string &path,
                       CheckpointIndex &index, int threads, bool view)
{
    auto h = readHeader(bytes, path);
    if (!h)
        return h.error();
    const size_t bodyAt = kHeaderSize + h->keyBytes;
    if (checksum(bytes.subspan(kHeaderSize, h->keyBytes), bytes.subspan(bodyAt), threads) !=
        h->hash)
        return Reader(bytes, 0, path).fail("checksum mismatch", kHeaderSize);
    Reader r(bytes, bodyAt, path);
    auto cut = [&](const char *what) { return r.fail(std::string(what) + " cut short", r.at()); };

    uint32_t n32 = 0;
    if (!r.get(n32) || n32 > r.left() / 8)
        return cut("info");
    for (uint32_t i = 0; i < n32; ++i) {
        std::string name, value;
        if (!r.str(name) || !r.str(value))
            return cut("info");
        index.info[std::move(name)] = std::move(value);
    }
    if (!r.get(n32) || n32 > r.left() / 4)
        return cut("files");
    index.files.resize(n32);
    for (std::string &f : index.files)
        if (!r.str(f))
            return cut("files");
    if (!r.get(n32) || n32 == 0 || n32 > UINT16_MAX || n32 > r.left() / 4)
        return r.fail("transform chains", r.at());
    index.transformChains.resize(n32);
    for (auto &chain : index.transformChains) {
        if (!r.get(n32) || n32 > r.left() / 4)
            return cut("transform chains");
        chain.resize(n32);
        for (std::string &s : chain)
            if (!r.str(s))
                return cut("transform chains");
    }
    uint64_t n = 0;
    if (!r.count(n, 19))
        return cut("problems");
    index.problems.resize(n);
    for (Problem &p : index.problems) {
        uint8_t hasOffset = 0, effect = 0;
        uint64_t offset = 0;
        if (!r.str(p.key) || !r.str(p.file) || !r.get(hasOffset) || !r.get(offset) ||
            !r.str(p.message) || !r.get(effect))
            return cut("problems");
        if (effect > uint8_t(Problem::Effect::Unreadable))
            return r.fail("problem effect " + std::to_string(effect), r.at() - 1);
        p.effect = Problem::Effect(effect);
        if (hasOffset)
            p.offset = offset;
    }
    const size_t files = index.files.size(), chains = index.transformChains.size();
    uint64_t tensorCount = 0, objectCount = 0, partCount = 0, keyBytes = 0, dimCount = 0,
             chunkCount = 0;
    if (!r.count(tensorCount, sizeof(TensorRecord)) ||
        !r.count(objectCount, sizeof(ObjectRecord)) || !r.get(n32) || n32 > r.left() / 4)
        return cut("entries");
    std::vector<std::string> dtypeNames(n32);
    std::vector<DType> dtypes(n32);
    for (size_t i = 0; i < dtypeNames.size(); ++i) {
        if (!r.str(dtypeNames[i]))
            return cut("dtype names");
        dtypes[i] = dtypeFromName(dtypeNames[i]).value_or(DType::Unknown);
    }
    if (!r.count(partCount, 4))
        return cut("path components");
    std::vector<std::string> parts(partCount);
    for (std::string &s : parts)
        if (!r.str(s))
            return cut("path components");
    const uint8_t *keys = nullptr, *dimBytes = nullptr, *chunkBytes = nullptr,
                  *tensorBytes = nullptr, *objectBytes = nullptr;
    if (!r.get(keyBytes) || !r.span(keyBytes, 1, keys) || !r.align())
        return cut("keys");
    if (!r.get(dimCount) || !r.span(dimCount, sizeof(int64_t), dimBytes))
        return cut("dims");
    if (!r.get(chunkCount) || !r.span(chunkCount, sizeof(Location), chunkBytes))
        return cut("chunks");
    const size_t tensorsAt = r.at();
    if (!r.span(tensorCount, sizeof(TensorRecord), tensorBytes))
        return cut("tensor records");
    const size_t objectsAt = r.at();
    if (!r.span(objectCount, sizeof(ObjectRecord), objectBytes) || r.left() != 0)
        return r.fail("object records do not end the file", objectsAt);

    // Each key is followed by a NUL.
    auto keyAt = [&](uint64_t offset, uint32_t length) -> const char * {
        if (offset >= keyBytes || length >= keyBytes - offset || keys[offset + length] != 0)
            return nullptr;
        return reinterpret_cast<const char *>(keys + offset);
    };
    auto pathOf = [&](uint64_t dots, uint32_t first, uint32_t count, KeyPath &out) {
        if (first > partCount || count > partCount - first)
            return false;
        out = KeyPath::fromCompact(
            dots,
            count ? std::vector<std::string>(parts.begin() + first, parts.begin() + first + count)
                  : std::vector<std::string>());
        return true;
    };
    // Records are self-contained: each thread builds its own range of entries. Pools are
    // 8-byte aligned in a mapped file, so entries can view them; otherwise (a fuzzer's input, or
    // bytes that do not stay mapped) they are copied, never read misaligned.
    const bool aligned = reinterpret_cast<uintptr_t>(dimBytes) % alignof(int64_t) == 0 &&
                         reinterpret_cast<uintptr_t>(chunkBytes) % alignof(Location) == 0;
    const bool viewPools = view && aligned;
    const size_t workers = workerCount(threads, tensorCount + objectCount);
    reserveFaulted(index.tensors, tensorCount, workers);
    reserveFaulted(index.objects, objectCount, workers);
    index.tensors.resize(tensorCount);
    index.objects.resize(objectCount);
    std::vector<Status> results(workers, Ok{});
    parallelFor(workers, [&](size_t worker) {
        for (size_t i = tensorCount * worker / workers, end = tensorCount * (worker + 1) / workers;
             i < end; ++i) {
            TensorRecord rec;
            std::memcpy(&rec, tensorBytes + i * sizeof rec, sizeof rec);
            TensorEntry &t = index.tensors[i];
            const uint64_t width = 2 * uint64_t(rec.ndim);
            const char *key = keyAt(rec.keyOffset, rec.keyLength);
            // Every range checked without overflow: counts are 32-bit, pools 64-bit, and a
            // tensor's chunk dims fit its 32-bit container (kMaxDims bounds the product).
            if (!key || rec.ndim > kMaxDims || width * rec.chunkCount > UINT32_MAX ||
                rec.dims > dimCount ||
                uint64_t(rec.ndim) + width * rec.chunkCount + rec.strideCount >
                    dimCount - rec.dims ||
                rec.firstChunk > chunkCount || rec.chunkCount > chunkCount - rec.firstChunk ||
                !pathOf(rec.pathDots, rec.firstPart, rec.partCount, t.path) ||
                rec.dtypeName >= dtypeNames.size()) {
                results[worker] = r.fail("tensor record " + std::to_string(i) + " out of range",
                                         tensorsAt + i * sizeof rec);
                return;
            }
            t.key = view ? CompactString::view(key, rec.keyLength)
                         : CompactString(std::string_view(key, rec.keyLength));
            t.dtypeName = dtypeNames[rec.dtypeName];
            t.dtype = dtypes[rec.dtypeName];
            const uint8_t *d = dimBytes + rec.dims * sizeof(int64_t);
            auto take = [&d, viewPools](CompactVector<int64_t> &v, uint64_t count) {
                if (viewPools) {
                    v = CompactVector<int64_t>::view(reinterpret_cast<const int64_t *>(d), count);
                } else {
                    v.resize(count);
                    if (count)
                        std::memcpy(v.edit().data(), d, count * sizeof(int64_t));
                }
                d += count * sizeof(int64_t);
            };
            take(t.shape, rec.ndim);
            take(t.chunkDims, width * rec.chunkCount);
            if (rec.strideCount) {
                t.strides.resize(rec.strideCount);
                std::memcpy(t.strides.data(), d, rec.strideCount * sizeof(int64_t));
            }
            t.storageOffset = rec.storageOffset;
            const uint8_t *c = chunkBytes + rec.firstChunk * sizeof(Location);
            if (viewPools) {
                t.chunks = CompactVector<Location>::view(reinterpret_cast<const Location *>(c),
                                                         rec.chunkCount);
            } else {
                t.chunks.resize(rec.chunkCount);
                if (rec.chunkCount)
                    std::memcpy(static_cast<void *>(t.chunks.edit().data()), c,
                                rec.chunkCount * sizeof(Location));
            }
            for (const Location &l : t.chunks)
                if (!validLocation(l, files, chains)) {
                    results[worker] = r.fail("tensor '" + t.key + "': chunk location out of range",
                                             tensorsAt + i * sizeof rec);
                    return;
                }
        }
        for (size_t i = objectCount * worker / workers, end = objectCount * (worker + 1) / workers;
             i < end; ++i) {
            ObjectRecord rec;
            std::memcpy(static_cast<void *>(&rec), objectBytes + i * sizeof rec, sizeof rec);
            ObjectEntry &o = index.objects[i];
            const char *key = keyAt(rec.keyOffset, rec.keyLength);
            if (!key || !pathOf(rec.pathDots, rec.firstPart, rec.partCount, o.path) ||
                rec.hasLocation > 1 ||
                (rec.hasLocation && !validLocation(rec.location, files, chains))) {
                results[worker] = r.fail("object record " + std::to_string(i) + " out of range",
                                         objectsAt + i * sizeof rec);
                return;
            }
            o.key = view ? CompactString::view(key, rec.keyLength)
                         : CompactString(std::string_view(key, rec.keyLength));
            if (rec.hasLocation)
                o.location = rec.location;
        }
    });
    for (Status &s : results)
        if (!s)
            return s;
    return Ok{};
}

} // namespace shardscope::detail
