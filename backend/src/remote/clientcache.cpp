// SPDX-License-Identifier: MIT
#include "remote/clientcache.h"

#include "common/backgroundworker.h"
#include "read/indexcache.h"
#include "shardscope/writefile.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <sys/stat.h>
#include <xxhash.h>

namespace fs = std::filesystem;

namespace shardscope::detail::remote {

namespace {

constexpr const char *kSuffix = ".sswire";

BackgroundWorker &writer()
{
    static BackgroundWorker worker;
    return worker;
}

// Mappings whose bytes an index views: kept for the life of the process (shardscope/compact.h),
// one per file (the same device, inode and size: a blob is replaced by a rename), as the
// persistent index keeps its entries' (read/indexcache.cpp).
std::shared_ptr<const MappedFile> mapKept(const std::string &path)
{
    static std::mutex mutex;
    static std::vector<std::shared_ptr<const MappedFile>> &kept =
        *new std::vector<std::shared_ptr<const MappedFile>>; // never unmapped, not even at exit
    struct stat id
    {
    };
    if (::stat(path.c_str(), &id) != 0)
        return nullptr;
    std::lock_guard lock(mutex);
    for (const auto &file : kept)
        if (file->path() == path && file->device() == uint64_t(id.st_dev) &&
            file->inode() == uint64_t(id.st_ino) && file->size() == uint64_t(id.st_size))
            return file;
    auto file = MappedFile::open(path, true);
    if (!file)
        return nullptr;
    if ((*file)->local()) // on a network file system an index copies it instead of viewing
        kept.push_back(*file);
    return *file;
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
        if (!name.starts_with("remote-") || !name.ends_with(kSuffix))
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

std::shared_ptr<const MappedFile> ClientIndexCache::blob(const std::string &identity) const
{
    if (!enabled())
        return nullptr;
    const std::string path = fileOf(identity);
    auto file = mapKept(path);
    if (file)
        ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // most recently used
    return file;
}

void ClientIndexCache::store(const std::string &identity, std::string_view blob,
                             std::shared_ptr<const void> keep) const
{
    if (!enabled() || blob.size() > m_maxBytes)
        return;
    writer().submit(
        [dir = m_dir, prefix = m_prefix, path = fileOf(identity), blob, keep, max = m_maxBytes] {
            std::error_code ec;
            fs::create_directories(dir, ec);
            AtomicWriteOptions o;
            o.flush = false; // a cache: the entry's own checksum finds a torn file
            o.mode = 0600;
            if (!writeFileAtomically(path, blob, o))
                evict(dir, prefix, path, max);
        });
}

void ClientIndexCache::store(const std::string &identity, std::string header,
                             std::string_view entry, std::shared_ptr<const void> keep) const
{
    if (!enabled() || header.size() + entry.size() > m_maxBytes)
        return;
    writer().submit([dir = m_dir, prefix = m_prefix, path = fileOf(identity),
                     header = std::move(header), entry, keep, max = m_maxBytes] {
        std::string blob;
        blob.reserve(header.size() + entry.size());
        blob.append(header).append(entry);
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
