// SPDX-License-Identifier: MIT
// A read fault injector for the tests, loaded with LD_PRELOAD into an unmodified shardscope-cli:
// pread() on a file whose name ends in $SHARDSCOPE_FAULT_FILE fails the way a failing disk or a
// file cut short under the reader does.
//   SHARDSCOPE_FAULT=eio    every read of it fails with EIO
//   SHARDSCOPE_FAULT=short  each read returns half of what was asked, then the file "ends"
//   SHARDSCOPE_FAULT=kill   the process is killed (SIGKILL) at its first read of the file, when
//                           $RANK (torchrun's) equals $SHARDSCOPE_FAULT_RANK: a rank lost midway
// The product has no test hook: what it does with these is what it does with a real disk.
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <sys/types.h>
#include <unistd.h>

namespace {

using PreadFn = ssize_t (*)(int, void *, size_t, off_t);

bool isFaulty(int fd)
{
    const char *suffix = std::getenv("SHARDSCOPE_FAULT_FILE");
    if (!suffix || !*suffix)
        return false;
    char link[64], target[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return false;
    const std::string path(target, size_t(n)), want(suffix);
    return path.size() >= want.size() &&
           path.compare(path.size() - want.size(), want.size(), want) == 0;
}

ssize_t inject(int fd, void *buf, size_t count, off_t offset, PreadFn real)
{
    if (!isFaulty(fd))
        return real(fd, buf, count, offset);
    const char *mode = std::getenv("SHARDSCOPE_FAULT");
    if (mode && std::strcmp(mode, "kill") == 0) {
        const char *rank = std::getenv("RANK"), *victim = std::getenv("SHARDSCOPE_FAULT_RANK");
        if (rank && victim && std::strcmp(rank, victim) == 0)
            ::kill(::getpid(), SIGKILL);
        return real(fd, buf, count, offset);
    }
    if (mode && std::strcmp(mode, "short") == 0) {
        thread_local int calls = 0;
        if (calls++ % 2 == 1)
            return 0; // the file ends here
        return real(fd, buf, count > 1 ? count / 2 : count, offset);
    }
    errno = EIO;
    return -1;
}

} // namespace

extern "C" ssize_t pread(int fd, void *buf, size_t count, off_t offset)
{
    static auto real = reinterpret_cast<PreadFn>(dlsym(RTLD_NEXT, "pread"));
    return inject(fd, buf, count, offset, real);
}

extern "C" ssize_t pread64(int fd, void *buf, size_t count, off_t offset)
{
    static auto real = reinterpret_cast<PreadFn>(dlsym(RTLD_NEXT, "pread64"));
    return inject(fd, buf, count, offset, real);
}
