// SPDX-License-Identifier: MIT
#include "remote/listing.h"

#include "shardscope/escape.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

namespace shardscope::detail::remote {

namespace {

// Subdirectories peeked at for checkpoint files, and the names read in each: a directory of
// thousands of runs on Lustre costs a metadata operation per name, so the guess stays bounded.
constexpr size_t kPeekedDirectories = 256;
constexpr size_t kPeekedNames = 1024;

bool validUtf8(const std::string &s)
{
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int n = c < 0x80         ? 0
                      : (c >> 5) == 6  ? 1
                      : (c >> 4) == 14 ? 2
                      : (c >> 3) == 30 ? 3
                                       : -1;
        if (n < 0 || i + size_t(n) >= s.size())
            return false;
        for (int k = 1; k <= n; ++k)
            if ((static_cast<unsigned char>(s[i + size_t(k)]) >> 6) != 2)
                return false;
        i += size_t(n) + 1;
    }
    return true;
}

std::string home()
{
    if (const char *h = std::getenv("HOME"); h && *h)
        return h;
    if (const passwd *pw = ::getpwuid(::getuid()); pw && pw->pw_dir)
        return pw->pw_dir;
    return "/";
}

// What the names inside a directory say: a DCP .metadata, Megatron's mp_rank_* directories or
// its root's latest_checkpointed_iteration.txt, safetensors (a file, or a sharded set's index).
bool checkpointMember(const std::string &name)
{
    return name == ".metadata" || name == "latest_checkpointed_iteration.txt" ||
           name.starts_with("mp_rank_") || name.ends_with(".safetensors") ||
           name.ends_with(".safetensors.index.json");
}

/** Whether a name alone says checkpoint: a .safetensors, .pt, .pth or .bin file, an
 *  `mp_rank_*` directory. */
bool checkpointName(const std::string &name, bool directory)
{
    if (directory)
        return name.starts_with("mp_rank_");
    for (std::string_view suffix : {".safetensors", ".pt", ".pth", ".bin"})
        if (name.ends_with(suffix))
            return true;
    return false;
}

bool holdsCheckpoint(int dirFd)
{
    DIR *d = ::fdopendir(dirFd);
    if (!d) {
        ::close(dirFd);
        return false;
    }
    bool found = false;
    size_t read = 0;
    while (const dirent *e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (checkpointMember(name)) {
            found = true;
            break;
        }
        if (++read >= kPeekedNames)
            break;
    }
    ::closedir(d);
    return found;
}

} // namespace

Result<RemoteListing> listDirectory(const std::string &path, const CancelToken &cancel,
                                    size_t maxEntries)
{
    std::string where = path;
    if (where.empty() || where == "~")
        where = home();
    else if (where.starts_with("~/"))
        where = home() + where.substr(1);
    auto failed = [&](const char *what) {
        return makeError(Error::Code::Io, std::string(what) + ": " + std::strerror(errno))
            .inFile(where);
    };
    char resolved[PATH_MAX];
    if (!::realpath(where.c_str(), resolved))
        return failed("cannot list");
    struct stat st;
    if (::stat(resolved, &st) != 0)
        return failed("cannot list");
    if (!S_ISDIR(st.st_mode))
        return makeError(Error::Code::Format, "not a directory").inFile(resolved);
    // O_DIRECTORY: whatever took the name's place since, only a directory is opened.
    const int fd = ::open(resolved, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return failed("cannot list");
    DIR *d = ::fdopendir(fd);
    if (!d) {
        ::close(fd);
        return failed("cannot list");
    }
    RemoteListing listing;
    listing.path = resolved;
    size_t peeked = 0;
    while (const dirent *e = ::readdir(d)) {
        if (cancel.cancelled()) {
            ::closedir(d);
            return makeError(Error::Code::Cancelled, "cancelled");
        }
        const std::string name = e->d_name;
        if (name == "." || name == "..")
            continue;
        if (checkpointMember(name))
            listing.checkpoint = true;
        if (listing.entries.size() >= maxEntries || !validUtf8(name)) {
            ++listing.leftOut;
            continue;
        }
        RemoteDirEntry entry;
        entry.name = name;
        struct stat es;
        if (::fstatat(fd, name.c_str(), &es, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(es.st_mode)) {
            entry.link = true;
            if (::fstatat(fd, name.c_str(), &es, 0) != 0)
                es.st_mode = 0; // points nowhere
        }
        if (S_ISDIR(es.st_mode)) {
            entry.kind = RemoteDirEntry::Kind::Directory;
        } else if (S_ISREG(es.st_mode)) {
            entry.kind = RemoteDirEntry::Kind::File;
            entry.size = uint64_t(es.st_size);
        }
        const bool dir = entry.kind == RemoteDirEntry::Kind::Directory;
        entry.checkpoint =
            (dir || entry.kind == RemoteDirEntry::Kind::File) && checkpointName(name, dir);
        if (dir && !entry.checkpoint && peeked < kPeekedDirectories) {
            ++peeked;
            const int sub =
                ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
            entry.checkpoint = sub >= 0 && holdsCheckpoint(sub);
        }
        listing.entries.push_back(std::move(entry));
    }
    ::closedir(d);
    std::sort(listing.entries.begin(), listing.entries.end(),
              [](const RemoteDirEntry &a, const RemoteDirEntry &b) {
                  const bool ad = a.kind == RemoteDirEntry::Kind::Directory;
                  const bool bd = b.kind == RemoteDirEntry::Kind::Directory;
                  return ad != bd ? ad : a.name < b.name;
              });
    return listing;
}

json listingToJson(const RemoteListing &listing)
{
    json entries = json::array();
    for (const RemoteDirEntry &e : listing.entries)
        entries.push_back({{"name", e.name},
                           {"kind", int(e.kind)},
                           {"link", e.link},
                           {"size", e.size},
                           {"checkpoint", e.checkpoint}});
    return {{"path", listing.path},
            {"checkpoint", listing.checkpoint},
            {"left_out", listing.leftOut},
            {"entries", std::move(entries)}};
}

Result<RemoteListing> listingFromJson(const json &j)
try {
    auto bad = [] { return makeError(Error::Code::Format, "a directory listing that is not one"); };
    if (!j.is_object() || !j.value("path", json()).is_string() ||
        !j.value("entries", json()).is_array())
        return bad();
    RemoteListing listing;
    listing.path = j["path"].get<std::string>();
    listing.checkpoint = j.value("checkpoint", false);
    listing.leftOut = j.value("left_out", size_t(0));
    for (const json &e : j["entries"]) {
        if (!e.is_object() || !e.value("name", json()).is_string())
            return bad();
        RemoteDirEntry entry;
        entry.name = e["name"].get<std::string>();
        const int kind = e.value("kind", int(RemoteDirEntry::Kind::Other));
        entry.kind = kind == int(RemoteDirEntry::Kind::File) ? RemoteDirEntry::Kind::File
                     : kind == int(RemoteDirEntry::Kind::Directory)
                         ? RemoteDirEntry::Kind::Directory
                         : RemoteDirEntry::Kind::Other;
        entry.link = e.value("link", false);
        entry.size = e.value("size", uint64_t(0));
        entry.checkpoint = e.value("checkpoint", false);
        listing.entries.push_back(std::move(entry));
    }
    return listing;
} catch (const json::exception &) {
    return makeError(Error::Code::Format, "a directory listing that is not one");
}

} // namespace shardscope::detail::remote
