// SPDX-License-Identifier: MIT
#include "remote/clientcache.h"

#include "common/backgroundworker.h"
#include "read/indexcache.h"
#include "remote/codec.h"
#include "shardscope/writefile.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <xxhash.h>

namespace fs = std::filesystem;

namespace shardscope::detail::remote {

namespace {

// A kept index: "SSKEPT1\n", u64 header bytes, u64 XXH3-64 of the header, the header (the
// wire's: u32 length, MessagePack), zeros to a multiple of 8, then the persistent index's entry:
// aligned in the file as an entry file is, so that its tensors view the mapping as a local open's
// do (read/indexcodec.h: its pools are 8-byte aligned from its start). The wire's blob (header,
// entry) left the entry anywhere: copied on every reopen. Files of that form (".sswire") are
// never read, only let go.
constexpr const char *kSuffix = ".sskept";
constexpr const char *kOldSuffix = ".sswire";
constexpr std::string_view kMagic = "SSKEPT1\n";
constexpr size_t kPrefix = 24;

BackgroundWorker &writer()
{
    static BackgroundWorker worker;
    return worker;
}

std::string keptBytes(std::string_view header, std::string_view entry)
{
    std::string out(kMagic);
    out.resize(kPrefix);
    const uint64_t n = header.size(), hash = XXH3_64bits(header.data(), header.size());
    std::memcpy(out.data() + 8, &n, 8);
    std::memcpy(out.data() + 16, &hash, 8);
    const size_t entryAt = (kPrefix + header.size() + 7) & ~size_t(7);
    out.reserve(entryAt + entry.size());
    out.append(header);
    out.resize(entryAt, '\0');
    out.append(entry);
    return out;
}

// This path's older blobs, then the least recently used of every host's past the budget.
void evict(const std::string &dir, const std::string &prefix, const std::string &keep,
           uint64_t maxBytes)
{
    std::error_code ec;
    std::vector<std::pair<fs::file_time_type, fs::path>> all;
    uint64_t total = 0;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (!name.starts_with("remote-") ||
            !(name.ends_with(kSuffix) || name.ends_with(kOldSuffix)))
            continue;
        if (name.starts_with(prefix) && e.path() != keep) {
            fs::remove(e.path(), ec);
            continue;
        }
        total += e.file_size(ec);
        all.emplace_back(e.last_write_time(ec), e.path());
    }
    std::sort(all.begin(), all.end());
    for (const auto &[when, path] : all) {
        if (total <= maxBytes || path == keep)
            break;
        total -= std::min<uint64_t>(total, fs::file_size(path, ec));
        fs::remove(path, ec);
    }
}

} // namespace

ClientIndexCache::ClientIndexCache(const RemoteTarget &target, const std::string &path)
{
    const IndexCacheSettings settings = IndexCacheSettings::fromEnvironment();
    if (settings.dir.empty())
        return;
    m_dir = settings.dir;
    m_maxBytes = settings.maxBytes;
    const std::string where = target.host + "\n" + std::to_string(target.port) + "\n" + path;
    char key[24];
    std::snprintf(key, sizeof key, "%016llx",
                  (unsigned long long)XXH3_64bits(where.data(), where.size()));
    m_prefix = std::string("remote-") + key + "-";
}

std::string ClientIndexCache::fileOf(const std::string &identity) const
{
    return (fs::path(m_dir) / (m_prefix + identity + kSuffix)).string();
}

std::vector<std::string> ClientIndexCache::identities() const
{
    std::vector<std::pair<fs::file_time_type, std::string>> found;
    if (!enabled())
        return {};
    writer().drain(); // one this process is still writing is cheaper than a transfer
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(m_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with(m_prefix) && name.ends_with(kSuffix) &&
            name.size() > m_prefix.size() + std::strlen(kSuffix))
            found.emplace_back(
                e.last_write_time(ec),
                name.substr(m_prefix.size(), name.size() - m_prefix.size() - std::strlen(kSuffix)));
    }
    std::sort(found.rbegin(), found.rend());
    std::vector<std::string> ids;
    for (auto &[when, id] : found)
        ids.push_back(std::move(id));
    return ids;
}

void ClientIndexCache::drop(const std::string &identity) const
{
    std::error_code ec;
    fs::remove(fileOf(identity), ec);
}

Result<ClientIndexCache::Kept> ClientIndexCache::kept(const std::string &identity) const
{
    const std::string path = fileOf(identity);
    auto gone = [&] {
        return makeError(Error::Code::NotFound, "the index kept here is gone").inFile(path);
    };
    if (!enabled())
        return gone();
    auto file = mapIndexFile(path);
    if (!file)
        return gone();
    const std::span<const uint8_t> bytes = file->bytes();
    uint64_t n = 0, hash = 0;
    if (bytes.size() >= kPrefix) {
        std::memcpy(&n, bytes.data() + 8, 8);
        std::memcpy(&hash, bytes.data() + 16, 8);
    }
    const uint64_t entryAt = (kPrefix + n + 7) & ~uint64_t(7);
    if (bytes.size() < kPrefix || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0 ||
        n > bytes.size() - kPrefix || entryAt > bytes.size() ||
        XXH3_64bits(bytes.data() + kPrefix, n) != hash) // open() drops it
        return makeError(Error::Code::Format, "not an index kept here, or cut short").inFile(path);
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // most recently used
    Kept k;
    k.header = std::string_view(reinterpret_cast<const char *>(bytes.data()) + kPrefix, n);
    k.entry = bytes.subspan(entryAt);
    k.file = std::move(file);
    return k;
}

Result<std::shared_ptr<CheckpointIndex>> ClientIndexCache::open(const std::string &identity,
                                                                const std::string &origin,
                                                                std::string *header) const
{
    auto k = kept(identity);
    auto unusable = [&](const Error &e) {
        drop(identity);
        return makeError(Error::Code::NotFound,
                         "the index kept here is unusable (" + e.toString() + "); asked for anew")
            .inFile(origin);
    };
    if (!k)
        return k.error().code == Error::Code::NotFound ? k.error() : unusable(k.error());
    auto index = std::make_shared<CheckpointIndex>();
    if (auto s = openIndexEntry(k->file, k->entry, k->file->path(), *index); !s)
        return unusable(s.error());
    if (header)
        *header = std::string(k->header);
    return index;
}

void ClientIndexCache::store(const std::string &identity, std::string_view blob,
                             std::shared_ptr<const void> keep) const
{
    auto parts = splitIndexBlob(blob);
    if (!parts)
        return;
    store(identity, std::string(parts->first), parts->second, std::move(keep));
}

void ClientIndexCache::store(const std::string &identity, std::string header,
                             std::string_view entry, std::shared_ptr<const void> keep) const
{
    if (!enabled() || header.size() + entry.size() > m_maxBytes)
        return;
    writer().submit([dir = m_dir, prefix = m_prefix, path = fileOf(identity),
                     header = std::move(header), entry, keep, max = m_maxBytes] {
        const std::string blob = keptBytes(header, entry);
        std::error_code ec;
        fs::create_directories(dir, ec);
        AtomicWriteOptions o;
        o.flush = false; // a cache: the entry's own checksum finds a torn file
        o.mode = 0600;
        if (!writeFileAtomically(path, blob, o))
            evict(dir, prefix, path, max);
    });
}

void waitForClientCacheWrites()
{
    writer().drain();
}

} // namespace shardscope::detail::remote
