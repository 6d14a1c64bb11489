// SPDX-License-Identifier: MIT
#include "remote/launch.h"

#include "remote/codec.h"
#include "remote/host.h"
#include "shardscope/escape.h"
#include "shardscope/writefile.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <poll.h>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace shardscope::detail::remote {

namespace {

std::string jobsDir()
{
    if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
        return std::string(x) + "/shardscope/jobs";
    if (const char *h = std::getenv("HOME"); h && *h)
        return std::string(h) + "/.cache/shardscope/jobs";
    return {};
}

// The verify flags of `request` (the same defaults apply as when typed).
std::vector<std::string> verifyArguments(const VerifyRequest &r, const std::string &layout,
                                         const RemoteLaunch &launch)
{
    std::vector<std::string> a = {"verify", r.checkpoint, "--layout",  layout,
                                  "--json", "--quiet",    "--backend", launch.backend};
    auto flag = [&](const char *name, long long v) {
        a.push_back(name);
        a.push_back(std::to_string(v));
    };
    for (auto [name, v] : {std::pair{"--dp", r.dp},
                           {"--tp", r.tp},
                           {"--pp", r.pp},
                           {"--ep", r.ep},
                           {"--etp", r.etp}})
        if (v > 0)
            flag(name, v);
    if (r.firstStageLayers >= 0)
        flag("--pp-first-layers", r.firstStageLayers);
    if (r.lastStageLayers >= 0)
        flag("--pp-last-layers", r.lastStageLayers);
    for (const std::string &rule : r.disabledRules) {
        a.push_back("--disable-rule");
        a.push_back(rule);
    }
    if (r.maxMemory)
        flag("--max-memory", (long long)r.maxMemory);
    if (r.threads)
        flag("--threads", r.threads);
    if (r.hash)
        a.push_back("--hash");
    return a;
}

// Every process descended from `root`: a launcher's workers may be in sessions of their own
// (torchrun's are), where a signal to its process group does not reach them.
std::vector<pid_t> descendants(pid_t root)
{
    std::map<pid_t, std::vector<pid_t>> children;
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        std::ifstream f(e.path() / "stat");
        std::string stat;
        std::getline(f, stat);
        const size_t close = stat.rfind(')');
        if (close == std::string::npos)
            continue;
        char state = 0;
        long ppid = 0;
        if (std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) == 2)
            children[pid_t(ppid)].push_back(pid_t(std::stol(name)));
    }
    std::vector<pid_t> found, todo = {root};
    while (!todo.empty()) {
        const pid_t p = todo.back();
        todo.pop_back();
        for (pid_t c : children[p]) {
            found.push_back(c);
            todo.push_back(c);
        }
    }
    return found;
}

// `sig` to the job: the launcher and its group while it lives (never once it was reaped: its
// number may be another's by then), and every process ever seen under it.
void signalJob(pid_t pid, bool reaped, std::set<pid_t> &seen, int sig)
{
    if (!reaped)
        for (pid_t p : descendants(pid))
            seen.insert(p);
    for (pid_t p : seen)
        ::kill(p, sig);
    if (!reaped) {
        ::kill(-pid, sig);
        ::kill(pid, sig);
    }
}

} // namespace

Result<LaunchCommand> launchCommand(const VerifyRequest &request, const std::string &layoutPath,
                                    const RemoteLaunch &launch)
{
    using L = RemoteLaunch::Launcher;
    if (launch.ranks < 1 || launch.nodes < 1 || launch.nodes > launch.ranks)
        return makeError(Error::Code::Format, "a job of " + std::to_string(launch.ranks) +
                                                  " ranks on " + std::to_string(launch.nodes) +
                                                  " nodes");
    const std::string srun = findOnPath("srun"), torchrun = findOnPath("torchrun");
    L which = launch.launcher;
    if (which == L::Auto)
        which = !srun.empty() ? L::Srun : L::Torchrun;
    const std::string self = selfExecutable();
    LaunchCommand c;
    if (which == L::Srun) {
        if (srun.empty())
            return makeError(Error::Code::NotFound,
                             "srun is not on the PATH of " + hostName() +
                                 " (a non-interactive ssh shell may lack the module that adds it)");
        c.argv = {srun,
                  "--nodes",
                  std::to_string(launch.nodes),
                  "--ntasks",
                  std::to_string(launch.ranks),
                  "--kill-on-bad-exit=1"};
        if (!launch.partition.empty())
            c.argv.insert(c.argv.end(), {"--partition", launch.partition});
        if (!launch.timeLimit.empty())
            c.argv.insert(c.argv.end(), {"--time", launch.timeLimit});
        if (!launch.account.empty())
            c.argv.insert(c.argv.end(), {"--account", launch.account});
    } else {
        if (torchrun.empty())
            return makeError(Error::Code::NotFound,
                             "neither srun nor torchrun is on the PATH of " + hostName());
        if (launch.nodes > 1)
            return makeError(Error::Code::Unsupported, "torchrun runs the job on this one node: " +
                                                           std::to_string(launch.nodes) +
                                                           " nodes need srun, which is not "
                                                           "on the PATH of " +
                                                           hostName());
        if (!launch.partition.empty() || !launch.timeLimit.empty() || !launch.account.empty())
            return makeError(Error::Code::Unsupported,
                             "a partition, time limit or account is Slurm's: torchrun runs the "
                             "job here, on " +
                                 hostName());
        c.argv = {torchrun,
                  "--no-python",
                  "--standalone",
                  "--nnodes",
                  "1",
                  "--nproc-per-node",
                  std::to_string(launch.ranks)};
    }
    c.argv.push_back(self);
    for (std::string &a : verifyArguments(request, layoutPath, launch))
        c.argv.push_back(std::move(a));
    return c;
}

Result<VerifyReport> runLaunchedVerify(const VerifyRequest &request, const Layout *layout,
                                       const RemoteLaunch &launch, const JobControl &control)
{
    // The ranks read the layout from a file (they may be on other nodes: the user's cache is
    // on the shared home). The one file this writes besides fix's output and the index cache.
    std::string layoutPath = request.layout;
    struct Remove
    {
        std::string path;
        ~Remove()
        {
            if (!path.empty())
                ::unlink(path.c_str());
        }
    } remove;
    if (layout) {
        static std::atomic<int> counter{0};
        const std::string dir = jobsDir();
        std::error_code ec;
        if (dir.empty() || (std::filesystem::create_directories(dir, ec), ec))
            return makeError(Error::Code::Io, "no cache directory to hand the job its layout")
                .inFile(dir);
        layoutPath = dir + "/layout-" + std::to_string(::getpid()) + "-" +
                     std::to_string(++counter) + ".json";
        if (auto e = writeFileAtomically(layoutPath, layoutToJson(*layout)))
            return *e;
        remove.path = layoutPath;
    }
    auto command = launchCommand(request, layoutPath, launch);
    if (!command)
        return command.error();

    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        return makeError(Error::Code::Io, std::string("pipe: ") + std::strerror(errno));
    std::vector<std::string> env;
    for (char **e = environ; *e; ++e)
        if (!std::string_view(*e).starts_with("SHARDSCOPE_PROGRESS_LINES="))
            env.emplace_back(*e);
    env.emplace_back("SHARDSCOPE_PROGRESS_LINES=1");
    std::vector<char *> argv, envp;
    for (std::string &a : command->argv)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string &e : env)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0)
        return makeError(Error::Code::Io, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::setpgid(0, 0); // its own group: a cancel stops every process of the job
        const int null = ::open("/dev/null", O_RDONLY);
        ::dup2(null, 0);
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        ::execve(argv[0], argv.data(), envp.data());
        const char message[] = "shardscope-cli serve: the launcher would not start\n";
        [[maybe_unused]] auto n = ::write(2, message, sizeof message - 1);
        ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out[1]);
    ::close(err[1]);

    std::string stdoutText, errLine;
    std::deque<std::string> tail; // the job's last lines of stderr, for a failure's message
    bool stopping = false;
    auto stopAt = std::chrono::steady_clock::time_point::max();
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open = 2;
    int status = 0;
    bool exited = false;
    std::set<pid_t> seen; // the job's processes, once it is stopped
    // After the launcher ends, what it wrote is read to its end; a worker it left behind may
    // hold the pipes open, so not for long.
    auto drainUntil = std::chrono::steady_clock::time_point::max();
    auto onErrLine = [&](const std::string &line) {
        if (line.starts_with(kProgressLine)) {
            char stage[32] = {};
            unsigned long long done = 0, total = 0;
            if (std::sscanf(line.c_str() + std::strlen(kProgressLine), "%31s %llu %llu", stage,
                            &done, &total) == 3 &&
                !stopping && !control.report({stage, done, total}))
                stopAt = std::chrono::steady_clock::now(); // cancel: stop it below
            return;
        }
        tail.push_back(line);
        if (tail.size() > 20)
            tail.pop_front();
    };
    while (open > 0 && std::chrono::steady_clock::now() < drainUntil) {
        if (!stopping && control.cancel.cancelled())
            stopAt = std::chrono::steady_clock::now();
        const auto now = std::chrono::steady_clock::now();
        if (!stopping && now >= stopAt) {
            stopping = true;
            signalJob(pid, exited, seen, SIGTERM);
            signalJob(pid, exited, seen, SIGCONT); // a hung (stopped) rank must run to end
            stopAt = now + std::chrono::seconds(5);
        } else if (stopping && now >= stopAt) {
            signalJob(pid, exited, seen, SIGKILL);
            stopAt = std::chrono::steady_clock::time_point::max();
        }
        if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) {
            exited = true;
            drainUntil = now + std::chrono::seconds(2);
        }
        if (::poll(fds, 2, 100) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[65536];
            const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n <= 0) {
                ::close(fds[i].fd);
                fds[i].fd = -1;
                --open;
                continue;
            }
            if (i == 0) {
                if (stdoutText.size() < (size_t(1) << 30))
                    stdoutText.append(buf, size_t(n));
                continue;
            }
            errLine.append(buf, size_t(n));
            for (size_t nl; (nl = errLine.find('\n')) != std::string::npos;) {
                onErrLine(errLine.substr(0, nl));
                errLine.erase(0, nl + 1);
            }
        }
    }
    if (!errLine.empty())
        onErrLine(errLine);
    for (int i = 0; i < 2; ++i)
        if (fds[i].fd >= 0)
            ::close(fds[i].fd);
    if (stopping) // none of it left running
        signalJob(pid, exited, seen, SIGKILL);
    while (!exited && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (stopping)
        return makeError(Error::Code::Cancelled, "cancelled: the verify job was stopped");
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    // Rank 0 prints the result and exits 0 or 1 (problems found); anything else failed.
    if ((code == 0 || code == 1) && !stdoutText.empty()) {
        auto report = verifyFromSchema(stdoutText);
        if (report) {
            report->layout = request.layout; // the name the user gave, not the job's file
            return report;
        }
    }
    // Our own one-line error says why; a launcher's traceback after it does not.
    std::string why = tail.empty() ? std::string("no message") : tail.back();
    for (const std::string &line : tail)
        if (line.find("shardscope-cli: ") != std::string::npos)
            why = line.substr(line.find("shardscope-cli: ") + 16);
    return makeError(Error::Code::Io, "the verify job (" + visibleText(command->argv[0]) +
                                          ") ended with exit code " + std::to_string(code) + ": " +
                                          visibleText(why));
}

} // namespace shardscope::detail::remote
