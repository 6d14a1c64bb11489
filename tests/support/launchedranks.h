// SPDX-License-Identifier: MIT
// The processes of a verify job a test's own server launched, found in /proc. Only the
// descendants of that server count: ctest runs the remote tests side by side, and a test that
// stopped another test's ranks would hang it (CI saw exactly that).
#pragma once

#include <algorithm>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/types.h>
#include <unistd.h>
#include <vector>

namespace shardscope::procs {

// The whole of a small /proc file ("" when the process went meanwhile: read(2), which says so,
// where a stream would throw).
inline std::string procFile(const std::string &path)
{
    std::string out;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
        out.append(buf, size_t(n));
    ::close(fd);
    return out;
}

// The state letter and parent of `pid` from /proc/PID/stat (after the command's ')', which
// may itself hold spaces and parentheses); {0, 0} when it is gone.
inline std::pair<char, pid_t> procState(pid_t pid)
{
    const std::string line = procFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = line.rfind(')');
    if (close == std::string::npos || line.size() < close + 5)
        return {0, 0};
    return {line[close + 2], pid_t(std::atoi(line.c_str() + close + 4))};
}

inline bool running(pid_t pid)
{
    const char state = procState(pid).first;
    return state != 0 && state != 'Z';
}

inline bool descendsFrom(pid_t pid, pid_t root)
{
    for (int depth = 0; pid > 1 && depth < 64; ++depth) {
        pid = procState(pid).second;
        if (pid == root)
            return true;
    }
    return false;
}

// The ranks (`shardscope-cli verify … --json --quiet`, not the `--ssh` client) that `server`
// launched, through torchrun or srun.
inline std::vector<pid_t> launchedRanks(pid_t server)
{
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        const std::string cmd = procFile("/proc/" + name + "/cmdline");
        std::vector<std::string> argv;
        for (size_t at = 0; at < cmd.size();) {
            const size_t end = std::min(cmd.find('\0', at), cmd.size());
            argv.push_back(cmd.substr(at, end - at));
            at = end + 1;
        }
        auto has = [&](const char *a) {
            return std::find(argv.begin(), argv.end(), a) != argv.end();
        };
        const pid_t pid = pid_t(std::stoi(name));
        if (!argv.empty() && argv[0].ends_with("shardscope-cli") && has("verify") &&
            has("--json") && has("--quiet") && !has("--ssh") && descendsFrom(pid, server))
            out.push_back(pid);
    }
    return out;
}

} // namespace shardscope::procs
