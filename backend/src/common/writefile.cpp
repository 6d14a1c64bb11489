// SPDX-License-Identifier: MIT
#include "shardscope/writefile.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace shardscope {

namespace {

Error ioError(const std::string &path, const char *what, int err)
{
    return makeError(Error::Code::Io, std::string(what) + ": " + std::strerror(err)).inFile(path);
}

// Signals that end a process by default while it writes: held until the file is complete or
// removed, so that Ctrl-C never leaves a temporary file behind.
class HeldSignals
{
public:
    HeldSignals()
    {
        sigset_t set;
        sigemptyset(&set);
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE})
            sigaddset(&set, s);
        pthread_sigmask(SIG_BLOCK, &set, &m_old);
    }
    ~HeldSignals() { pthread_sigmask(SIG_SETMASK, &m_old, nullptr); }
    HeldSignals(const HeldSignals &) = delete;
    HeldSignals &operator=(const HeldSignals &) = delete;

private:
    sigset_t m_old;
};

// umask() can only be read by setting it, which races with other threads creating files:
// Linux says it in /proc/self/status.
mode_t createMode()
{
    mode_t mask = 022;
    if (FILE *f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f))
            if (std::strncmp(line, "Umask:", 6) == 0) {
                mask = mode_t(std::strtoul(line + 6, nullptr, 8));
                break;
            }
        std::fclose(f);
    }
    return 0666 & ~mask;
}

} // namespace

std::optional<Error> writeFileAtomically(const std::string &path, std::string_view content)
{
    return writeFileAtomically(path, content, AtomicWriteOptions{});
}

std::optional<Error> writeFileAtomically(const std::string &path, std::string_view content,
                                         const AtomicWriteOptions &options)
{
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (name.empty() || name == "." || name == "..")
        return makeError(Error::Code::Io, "not a file name").inFile(path);
    std::string temp =
        (slash == std::string::npos ? std::string() : dir) + "." + name + ".shardscope-XXXXXX";

    const HeldSignals held;
    const int fd = mkstemp(temp.data());
    if (fd < 0)
        return ioError(path, "cannot create a file beside it", errno);
    auto fail = [&](const char *what, int err) {
        close(fd);
        unlink(temp.c_str());
        return ioError(path, what, err);
    };
    // An existing file keeps its mode; a new one gets what open(O_CREAT, 0666) would give.
    struct stat existing;
    const mode_t mode = options.mode >= 0                    ? mode_t(options.mode)
                        : stat(path.c_str(), &existing) == 0 ? (existing.st_mode & 07777)
                                                             : createMode();
    if (fchmod(fd, mode) != 0)
        return fail("cannot set permissions", errno);
    for (size_t done = 0; done < content.size();) {
        const ssize_t n = write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fail("cannot write", n < 0 ? errno : EIO);
        done += size_t(n);
    }
    if (options.flush && fsync(fd) != 0)
        return fail("cannot flush to disk", errno);
    if (close(fd) != 0) {
        const int err = errno;
        unlink(temp.c_str());
        return ioError(path, "cannot write", err);
    }
    if (rename(temp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        unlink(temp.c_str());
        return ioError(path, "cannot replace", err);
    }
    return std::nullopt;
}

} // namespace shardscope
