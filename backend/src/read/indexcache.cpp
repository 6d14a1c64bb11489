// SPDX-License-Identifier: MIT
// The persistent index: where its files live, when one may be used, and LRU eviction.
#include "read/indexcache.h"

#include "common/backgroundworker.h"
#include "common/regularfile.h"
#include "read/indexcodec.h"
#include "read/mappedfile.h"
#include "read/readers.h"
#include "shardscope/version.h"
#include "shardscope/writefile.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

// A bad value is ignored: the cache is an optimisation, never a reason to fail an open.
int64_t envNumber(const char *name, int64_t fallback)
{
    const char *v = std::getenv(name);
    if (!v || !*v)
        return fallback;
    char *end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    return *end == '\0' && x >= 0 ? int64_t(x) : fallback;
}

} // namespace

IndexCacheSettings IndexCacheSettings::fromEnvironment()
{
    IndexCacheSettings s;
    if (const char *off = std::getenv("SHARDSCOPE_NO_CACHE");
        off && *off && std::string(off) != "0")
        return s;
    if (const char *d = std::getenv("SHARDSCOPE_CACHE_DIR"); d && *d)
        s.dir = d;
    else if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
        s.dir = std::string(x) + "/shardscope/index";
    else if (const char *h = std::getenv("HOME"); h && *h)
        s.dir = std::string(h) + "/.cache/shardscope/index";
    s.maxBytes = uint64_t(std::min<int64_t>(envNumber("SHARDSCOPE_CACHE_MAX_MB", 4096), 1 << 30))
                 << 20;
    s.minBytes = uint64_t(envNumber("SHARDSCOPE_CACHE_MIN_BYTES", 1 << 20));
    s.settleSeconds = std::min<int64_t>(envNumber("SHARDSCOPE_CACHE_SETTLE_SECONDS", 2), 86400);
    return s;
}

namespace {

int64_t nanos(const timespec &t)
{
    return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// XXH3 of the first and last 64 KiB and 16 blocks of 4 KiB spread between: a change of a few
// bytes can escape it, but never one that leaves device, inode, size and both times alone
// unless it came within one clock tick of the last (see settleSeconds).
bool sign(const std::string &dir, const std::string &name, FileSignature &f)
{
    const std::string path = (fs::path(dir) / name).string();
    auto opened = openRegularFile(path); // a FIFO's open() would block: readDcp says what it is
    if (!opened)
        return false;
    const int fd = *opened;
    struct stat st
    {
    };
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (ok) {
        f.name = name;
        f.device = uint64_t(st.st_dev);
        f.inode = uint64_t(st.st_ino);
        f.size = uint64_t(st.st_size);
        f.mtimeNs = nanos(st.st_mtim);
        f.ctimeNs = nanos(st.st_ctim);
        XXH3_state_t *state = XXH3_createState();
        XXH3_64bits_reset(state);
        std::vector<char> buf(64 << 10);
        auto take = [&](uint64_t at, size_t n) {
            n = size_t(std::min<uint64_t>(n, f.size - std::min(at, f.size)));
            const ssize_t got = n ? ::pread(fd, buf.data(), n, off_t(at)) : 0;
            ok = ok && got == ssize_t(n);
            if (ok)
                XXH3_64bits_update(state, buf.data(), n);
        };
        if (f.size <= (1 << 20)) {
            for (uint64_t at = 0; ok && at < f.size; at += buf.size())
                take(at, buf.size());
        } else {
            take(0, buf.size());
            for (uint64_t i = 1; i <= 16; ++i)
                take(f.size / 17 * i, 4096);
            take(f.size - buf.size(), buf.size());
        }
        f.sampleHash = XXH3_64bits_digest(state);
        XXH3_freeState(state);
    }
    ::close(fd);
    return ok;
}

std::string entryName(const IndexCacheKey &key)
{
    std::string id = key.build + '\0' + key.directory;
    for (const FileSignature &f : key.files)
        id += '\0' + f.name + '\0' + std::to_string(f.device) + ':' + std::to_string(f.inode);
    const XXH128_hash_t h = XXH3_128bits(id.data(), id.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)h.high64,
                  (unsigned long long)h.low64);
    return hex;
}

// Least recently used first (a hit sets the file's modification time), until the entries fit.
// An entry's compressed form (ENTRY.zst) counts with it and goes with it; one whose entry is
// gone goes too.
void evict(const std::string &dir, uint64_t maxBytes)
{
    struct Entry
    {
        fs::file_time_type used;
        uint64_t size;
        fs::path path;
    };
    std::vector<Entry> entries;
    std::map<std::string, uint64_t> compressed; // by the entry's name
    uint64_t total = 0;
    std::error_code ec;
    const auto now = fs::file_time_type::clock::now();
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        std::error_code ec2;
        const auto used = e.last_write_time(ec2);
        const uint64_t size = e.file_size(ec2);
        if (ec2)
            continue;
        if (n.starts_with('.') && (n.find(".ssidx.shardscope-") != std::string::npos ||
                                   n.find(".ssidx.zst.shardscope-") != std::string::npos)) {
            if (now - used > std::chrono::hours(1)) // left by a process that died writing it
                fs::remove(e.path(), ec2);
            continue;
        }
        if (n.ends_with(".ssidx.zst")) {
            compressed[n.substr(0, n.size() - 4)] = size;
            continue;
        }
        if (!n.ends_with(".ssidx"))
            continue;
        entries.push_back({used, size, e.path()});
        total += size;
    }
    for (Entry &e : entries)
        if (auto it = compressed.find(e.path.filename().string()); it != compressed.end()) {
            e.size += it->second;
            total += it->second;
            compressed.erase(it);
        }
    for (const auto &[name, size] : compressed) { // its entry is gone
        std::error_code ec2;
        fs::remove(fs::path(dir) / (name + ".zst"), ec2);
    }
    std::sort(entries.begin(), entries.end(),
              [](const Entry &a, const Entry &b) { return a.used < b.used; });
    for (const Entry &e : entries) {
        if (total <= maxBytes)
            break;
        std::error_code ec2;
        fs::remove(e.path.string() + ".zst", ec2);
        if (fs::remove(e.path, ec2))
            total -= e.size;
    }
}

// Into a temporary file beside it, then renamed over it: a reader sees a whole entry or none.
std::string store(const std::string &dir, const std::string &entry, std::string_view bytes)
{
    // Made 0700 (key names are the user's); a directory that exists is left as it is: it may
    // be a shared one the user named.
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        fs::create_directories(fs::path(dir).parent_path(), ec);
        if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
            return "cannot create " + dir + ": " + std::strerror(errno);
    }
    // Whole or not at all (a reader sees the old entry or the new one); not flushed to disk:
    // the checksum finds an entry a crash cut short.
    if (auto err = writeFileAtomically(entry, bytes, AtomicWriteOptions{false, 0600}))
        return err->toString();
    return {};
}

// An entry that was read stays mapped for the life of the process: the index's tensors view its
// bytes (shardscope/compact.h), and so may any copy of them. A reopen of the same file (the window
// opening the checkpoint again) uses the mapping it already has, so a process holds one mapping
// per entry file it read, and an entry evicted or replaced meanwhile keeps its disk blocks until
// the process ends. The same file is the same device, inode and size: entries are replaced by a
// rename, and each read touches its times (least recently used). Its bytes are checked (key,
// checksum, every record) on every open. On a network file system nothing is kept: the entry is
// copied, as a page of it may not come back once another host removed it (MappedFile::local).
class KeptMappings
{
public:
    static KeptMappings &instance()
    {
        static KeptMappings &k = *new KeptMappings; // never unmapped, not even at exit
        return k;
    }
    /** The entry file mapped: the mapping kept from an earlier read of the same file, if any. */
    std::shared_ptr<const MappedFile> map(const std::string &path)
    {
        struct stat id
        {
        };
        if (::stat(path.c_str(), &id) != 0)
            return nullptr;
        {
            std::lock_guard lock(m_mutex);
            for (const auto &file : m_kept)
                if (file->path() == path && file->device() == uint64_t(id.st_dev) &&
                    file->inode() == uint64_t(id.st_ino) && file->size() == uint64_t(id.st_size))
                    return file;
        }
        auto file = MappedFile::open(path, true); // its identity from fstat(), not the stat above
        return file ? *file : nullptr;
    }
    /** Keeps `file` mapped until the process ends: an index views its bytes. */
    void keep(const std::shared_ptr<const MappedFile> &file)
    {
        std::lock_guard lock(m_mutex);
        if (std::find(m_kept.begin(), m_kept.end(), file) == m_kept.end())
            m_kept.push_back(file);
    }

private:
    std::mutex m_mutex;
    std::vector<std::shared_ptr<const MappedFile>> m_kept;
};

// Entries are written in the order they were made, after the open returns; a short CLI run
// still leaves its entry (the worker is joined at exit).
BackgroundWorker &entryWriter()
{
    static BackgroundWorker writer;
    return writer;
}

// The entries submitted and not yet written, by path (a remote client is sent them meanwhile).
struct PendingWrites
{
    std::mutex mutex;
    std::map<std::string, std::shared_ptr<const HotVector<char>>> bytes;
};
PendingWrites &pendingWrites()
{
    static PendingWrites p;
    return p;
}

} // namespace

std::shared_ptr<const MappedFile> mapIndexFile(const std::string &path)
{
    return KeptMappings::instance().map(path);
}

Status openIndexEntry(const std::shared_ptr<const MappedFile> &file, std::span<const uint8_t> entry,
                      const std::string &path, CheckpointIndex &index, int threads)
{
    const bool view = file->local();
    Status st = decodeIndexBody(entry, path, index, threads, view);
    if (st && view)
        KeptMappings::instance().keep(file);
    return st;
}

namespace {

// The key of `dir`'s metadata as it is now, and the entry file it would be kept in; none when
// the persistent index is off, the metadata is small, or a file of it cannot be signed.
std::optional<std::pair<IndexCacheKey, std::string>> entryFor(const std::string &dir,
                                                              const std::vector<std::string> &metas,
                                                              const IndexCacheSettings &settings)
{
    if (settings.dir.empty() || metas.empty())
        return std::nullopt;
    IndexCacheKey key;
    key.build = std::string("shardscope ") + kVersion + ", index schema " +
                std::to_string(kIndexCacheSchema);
    key.directory = dir;
    // Small metadata is decoded without reading its bytes for a signature first.
    uint64_t total = 0;
    for (const std::string &m : metas) {
        std::error_code ec; // not a regular file: readDcp says what it is
        if (const uintmax_t n = fs::file_size(fs::path(dir) / m, ec); !ec)
            total += n;
    }
    if (total < settings.minBytes)
        return std::nullopt;
    for (const std::string &m : metas) {
        FileSignature f;
        if (!sign(dir, m, f))
            return std::nullopt; // readDcp says what is wrong
        key.files.push_back(std::move(f));
    }
    std::string entry = (fs::path(settings.dir) / (entryName(key) + ".ssidx")).string();
    return std::pair(std::move(key), std::move(entry));
}

} // namespace

std::optional<CurrentIndexEntry> currentIndexEntry(const std::string &dir)
{
    const IndexCacheSettings settings = IndexCacheSettings::fromEnvironment();
    auto found = entryFor(dir, listDcpMetadata(dir), settings);
    if (!found)
        return std::nullopt;
    waitForIndexWrites(); // one this process is still writing
    const auto &[key, path] = *found;
    auto file = MappedFile::open(path);
    if (!file)
        return std::nullopt;
    auto stored = decodeIndexKey((*file)->bytes(), path);
    if (!stored || *stored != key)
        return std::nullopt;
    return CurrentIndexEntry{path, *file, (*file)->bytes()};
}

Status readDcpCached(const std::string &dir, CheckpointIndex &index, int threads,
                     const std::function<void(const CheckpointIndex &)> &onKeysKnown,
                     const IndexCacheSettings &settings)
{
    const bool stream = threads != 1;
    auto found = entryFor(dir, listDcpMetadata(dir), settings);
    if (!found)
        return readDcp(dir, index, stream, onKeysKnown);
    const IndexCacheKey &key = found->first;
    const std::string &entry = found->second;
    waitForIndexWrites(); // one this process is still writing is cheaper than a decode
    std::string why;      // why an entry that was there was not used
    if (auto file = mapIndexFile(entry)) {
        auto stored = decodeIndexKey(file->bytes(), entry);
        if (!stored) {
            why = "ignored " + stored.error().toString();
        } else if (*stored != key) {
            why = "the entry was for an earlier version of the metadata";
        } else {
            CheckpointIndex cached;
            cached.format = index.format;
            cached.inputPath = index.inputPath;
            cached.dataDir = index.dataDir;
            cached.info = index.info;
            Status st = openIndexEntry(file, file->bytes(), entry, cached, threads);
            if (st) {
                index = std::move(cached);
                index.info["index_cache"] = "read from " + entry;
                ::utimensat(AT_FDCWD, entry.c_str(), nullptr, 0); // most recently used
                return Ok{}; // read whole: no point where only the keys are known
            }
            why = "ignored " + st.error().toString();
        }
    }

    const int64_t started = nanos([] {
        timespec t{};
        ::clock_gettime(CLOCK_REALTIME, &t);
        return t;
    }());
    const std::map<std::string, std::string> before = index.info;
    HotVector<char> spare; // the decoder's memo: the entry is written into its pages
    Status st = readDcp(dir, index, stream, onKeysKnown, &spare);
    if (!st)
        return st;
    auto note = [&](std::string what) {
        index.info["index_cache"] = why.empty() ? what : why + "; " + what;
        return Ok{};
    };
    const int64_t settled = started - settings.settleSeconds * 1'000'000'000;
    for (const FileSignature &f : key.files)
        if (std::max(f.mtimeNs, f.ctimeNs) >= settled)
            return note("not written: " + f.name + " changed moments before it was read");
    for (const FileSignature &f : key.files) {
        FileSignature now;
        if (!sign(dir, f.name, now) || now != f)
            return note("not written: " + f.name + " changed while it was read");
    }
    std::vector<std::string> infoKeys;
    for (const auto &[name, value] : index.info)
        if (auto it = before.find(name); it == before.end() || it->second != value)
            infoKeys.push_back(name);
    auto bytes =
        std::make_shared<HotVector<char>>(encodeIndex(key, index, infoKeys, std::move(spare)));
    if (bytes->size() > settings.maxBytes)
        return note("not written: " + std::to_string(bytes->size() >> 20) +
                    " MiB, more than the cache's SHARDSCOPE_CACHE_MAX_MB");
    // Written after the open returns: the caller goes on while the kernel copies the bytes.
    {
        std::lock_guard lock(pendingWrites().mutex);
        pendingWrites().bytes[entry] = bytes;
    }
    entryWriter().submit([bytes, settings, entry] {
        // The compressed form of the entry this one replaces is no longer its form.
        std::error_code ec;
        fs::remove(entry + ".zst", ec);
        if (store(settings.dir, entry, std::string_view(bytes->data(), bytes->size())).empty())
            evict(settings.dir, settings.maxBytes);
        std::lock_guard lock(pendingWrites().mutex);
        if (auto it = pendingWrites().bytes.find(entry);
            it != pendingWrites().bytes.end() && it->second == bytes)
            pendingWrites().bytes.erase(it);
    });
    return note("writing to " + entry);
}

namespace {

constexpr std::string_view kCompressedMagic = "SSIDXZ1\n";
constexpr size_t kCompressedHeader = 32;

} // namespace

Result<CompressedEntry> keptCompressedEntry(const std::string &entryPath,
                                            std::span<const uint8_t> entry)
{
    const std::string path = entryPath + ".zst";
    auto bad = [&](const std::string &why) {
        return makeError(Error::Code::Format, why).inFile(path);
    };
    auto file = MappedFile::open(path, true);
    if (!file)
        return makeError(Error::Code::NotFound, "none kept").inFile(path);
    const std::span<const uint8_t> bytes = (*file)->bytes();
    if (bytes.size() < kCompressedHeader ||
        std::memcmp(bytes.data(), kCompressedMagic.data(), kCompressedMagic.size()) != 0)
        return bad("not a compressed entry");
    uint64_t size = 0, sum = 0, hash = 0;
    std::memcpy(&size, bytes.data() + 8, 8);
    std::memcpy(&sum, bytes.data() + 16, 8);
    std::memcpy(&hash, bytes.data() + 24, 8);
    if (size != entry.size() || sum != storedIndexChecksum(entry))
        return bad("the compressed form of an earlier entry");
    const std::span<const uint8_t> frame = bytes.subspan(kCompressedHeader);
    if (XXH3_64bits(frame.data(), frame.size()) != hash)
        return bad("checksum mismatch");
    CompressedEntry kept;
    kept.frame = std::string_view(reinterpret_cast<const char *>(frame.data()), frame.size());
    kept.keep = std::move(*file);
    return kept;
}

void keepCompressedEntry(const std::string &entryPath, std::span<const uint8_t> entry,
                         std::string frame)
{
    std::string header(kCompressedMagic);
    header.resize(kCompressedHeader);
    const uint64_t size = entry.size(), sum = storedIndexChecksum(entry),
                   hash = XXH3_64bits(frame.data(), frame.size());
    std::memcpy(header.data() + 8, &size, 8);
    std::memcpy(header.data() + 16, &sum, 8);
    std::memcpy(header.data() + 24, &hash, 8);
    auto bytes = std::make_shared<std::string>(std::move(header) + frame);
    const uint64_t maxBytes = IndexCacheSettings::fromEnvironment().maxBytes;
    entryWriter().submit([bytes, entryPath, maxBytes] {
        const std::string dir = fs::path(entryPath).parent_path().string();
        if (!fs::exists(entryPath)) // its entry was not written (or evicted meanwhile)
            return;
        if (!writeFileAtomically(entryPath + ".zst", *bytes, AtomicWriteOptions{false, 0600}))
            evict(dir, maxBytes);
    });
}

void waitForIndexWrites()
{
    entryWriter().drain();
}

std::shared_ptr<const HotVector<char>> pendingIndexWrite(const std::string &path)
{
    std::lock_guard lock(pendingWrites().mutex);
    auto it = pendingWrites().bytes.find(path);
    return it == pendingWrites().bytes.end() ? nullptr : it->second;
}

} // namespace shardscope::detail

void shardscope::waitForIndexWrites()
{
    detail::waitForIndexWrites();
}
