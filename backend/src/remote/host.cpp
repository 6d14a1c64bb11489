// SPDX-License-Identifier: MIT
#include "remote/host.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace shardscope::detail::remote {

namespace {

std::string firstLine(const std::string &path)
{
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    return line;
}

// The cgroup v2 path of this process ("0::/user.slice/…"), or empty under v1 only.
std::string cgroupV2Dir()
{
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line))
        if (line.starts_with("0::"))
            return "/sys/fs/cgroup" + line.substr(3);
    return {};
}

std::optional<uint64_t> number(const std::string &text)
{
    if (text.empty() || text == "max")
        return std::nullopt;
    char *end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (end == text.c_str())
        return std::nullopt;
    return uint64_t(v);
}

} // namespace

int usableCpus()
{
    int cpus = int(std::max(1u, std::thread::hardware_concurrency()));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        cpus = std::max(1, CPU_COUNT(&set));
    // A quota of Q microseconds per period P is Q/P CPUs' worth of time.
    double quota = 0;
    if (const std::string dir = cgroupV2Dir(); !dir.empty()) {
        std::istringstream in(firstLine(dir + "/cpu.max"));
        std::string q, p;
        if (in >> q >> p)
            if (auto qn = number(q), pn = number(p); qn && pn && *pn)
                quota = double(*qn) / double(*pn);
    }
    if (quota == 0) {
        auto q = firstLine("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
        auto p = number(firstLine("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
        if (!q.empty() && q[0] != '-')
            if (auto qn = number(q); qn && p && *p)
                quota = double(*qn) / double(*p);
    }
    if (quota > 0)
        cpus = std::min(cpus, std::max(1, int(std::ceil(quota))));
    return cpus;
}

std::optional<uint64_t> cgroupMemoryLimit()
{
    if (const std::string dir = cgroupV2Dir(); !dir.empty())
        if (auto v = number(firstLine(dir + "/memory.max")))
            return v;
    auto v = number(firstLine("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
    // v1 says "unlimited" with a huge number.
    if (v && *v < (uint64_t(1) << 60))
        return v;
    return std::nullopt;
}

uint64_t physicalMemory()
{
    return uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
}

std::string findOnPath(const std::string &name)
{
    const char *path = std::getenv("PATH");
    std::istringstream dirs(path ? path : "/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        struct stat st;
        if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            ::access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    return {};
}

std::string selfExecutable()
{
    std::vector<char> buf(4096);
    const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    return n > 0 ? std::string(buf.data(), size_t(n)) : std::string();
}

std::string hostName()
{
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0)
        return "?";
    return name;
}

} // namespace shardscope::detail::remote
