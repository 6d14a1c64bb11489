// SPDX-License-Identifier: MIT
#include "common/regularfile.h"
#include "common/problemtext.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace shardscope::detail {

std::string fileKindName(mode_t mode)
{
    if (S_ISREG(mode))
        return {};
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISDIR(mode))
        return "a directory";
    return "not a regular file";
}

Error notRegularFile(const std::string &path, const std::string &kind)
{
    return makeError(Error::Code::Io,
                     "is " + kind + ", " + std::string(kNotRegularFile) + ": refused unread")
        .inFile(path);
}

Result<int> openRegularFile(const std::string &path)
{
    struct stat st
    {
    };
    if (::stat(path.c_str(), &st) != 0)
        return makeError(Error::Code::Io, std::strerror(errno)).inFile(path);
    if (std::string kind = fileKindName(st.st_mode); !kind.empty())
        return notRegularFile(path, kind);
    // O_NONBLOCK: should the path have become a FIFO since the stat(), open() returns at once
    // and the fstat() below refuses it. Reads of a regular file ignore the flag.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return makeError(Error::Code::Io, std::strerror(errno)).inFile(path);
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return makeError(Error::Code::Io, std::strerror(err)).inFile(path);
    }
    if (std::string kind = fileKindName(st.st_mode); !kind.empty()) {
        ::close(fd);
        return notRegularFile(path, kind);
    }
    return fd;
}

Result<std::string> readRegularFile(const std::string &path, uint64_t maxBytes)
{
    auto fd = openRegularFile(path);
    if (!fd)
        return fd.error();
    struct stat st
    {
    };
    std::string out;
    Status status = Ok{};
    if (::fstat(*fd, &st) != 0) {
        status = makeError(Error::Code::Io, std::strerror(errno)).inFile(path);
    } else if (uint64_t(st.st_size) > maxBytes) {
        status =
            makeError(Error::Code::Limit, "file larger than " + std::to_string(maxBytes) + " bytes")
                .inFile(path);
    } else {
        out.resize(size_t(st.st_size));
        size_t done = 0;
        while (done < out.size()) {
            const ssize_t got = ::pread(*fd, out.data() + done, out.size() - done, off_t(done));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) { // cut short since the fstat(), or the disk failed
                status =
                    makeError(Error::Code::Io, got < 0 ? std::strerror(errno) : "file ends early")
                        .inFile(path)
                        .atOffset(done);
                break;
            }
            done += size_t(got);
        }
    }
    ::close(*fd);
    if (!status)
        return status.error();
    return out;
}

} // namespace shardscope::detail
