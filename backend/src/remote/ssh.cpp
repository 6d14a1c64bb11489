// SPDX-License-Identifier: MIT
#include "remote/ssh.h"

#include "remote/host.h"
#include "shardscope/escape.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace shardscope {

Result<RemoteTarget> RemoteTarget::parse(std::string_view d)
{
    auto refuse = [&](const std::string &why) {
        return makeError(Error::Code::Format, "--ssh " + visibleName(std::string(d)) + ": " + why);
    };
    if (d.empty())
        return refuse("no host");
    if (d.front() == '-')
        return refuse("a destination starting with '-' would be taken for an ssh option");
    for (char c : d)
        if (uint8_t(c) <= ' ' || c == 0x7f)
            return refuse("a destination holds no spaces or control characters");
    const size_t at = d.rfind('@');
    const std::string_view user = at == std::string_view::npos ? "" : d.substr(0, at + 1);
    const std::string_view rest = at == std::string_view::npos ? d : d.substr(at + 1);
    std::string_view host = rest, port;
    bool hasPort = false;
    if (rest.starts_with('[')) { // [v6-address]:port
        const size_t close = rest.find(']');
        if (close == std::string_view::npos)
            return refuse("an unclosed '['");
        host = rest.substr(1, close - 1);
        const std::string_view after = rest.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':')
                return refuse("text after ']' that is not :PORT");
            port = after.substr(1);
            hasPort = true;
        }
    } else if (std::count(rest.begin(), rest.end(), ':') == 1) {
        const size_t colon = rest.find(':');
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
        hasPort = true;
    } // several colons and no brackets: an IPv6 address without a port
    if (host.empty())
        return refuse("no host");
    RemoteTarget t;
    t.host = std::string(user) + std::string(host);
    if (hasPort) {
        int p = 0;
        for (char c : port) {
            if (c < '0' || c > '9' || p > 65535)
                return refuse("the port is not a number");
            p = p * 10 + (c - '0');
        }
        if (port.empty() || p < 1 || p > 65535)
            return refuse("the port is not in 1–65535");
        t.port = p;
    }
    return t;
}

std::string RemoteTarget::name() const
{
    return port ? host + ":" + std::to_string(port) : host;
}

namespace detail::remote {

std::string serverCommand(const std::string &server)
{
    std::string word;
    if (server == "~")
        word = "\"$HOME\"";
    else if (server.starts_with("~/"))
        word = "\"$HOME\"/" + shellQuote(server.substr(2));
    else
        word = shellQuote(server);
    return "exec " + word + " serve --stdio";
}

std::vector<std::string> sshCommand(const RemoteTarget &target)
{
    const char *program = std::getenv("SHARDSCOPE_SSH");
    // AMReXplorer's options (docs/remote.md): no forwarding of anything, a dead link noticed
    // within 45 s, a host that does not answer within 30 s.
    std::vector<std::string> argv = {program && *program ? program : "ssh",
                                     "-T",
                                     "-o",
                                     "ClearAllForwardings=yes",
                                     "-o",
                                     "ServerAliveInterval=15",
                                     "-o",
                                     "ServerAliveCountMax=3",
                                     "-o",
                                     "ConnectTimeout=30"};
    if (target.port) {
        argv.push_back("-p");
        argv.push_back(std::to_string(target.port));
    }
    argv.insert(argv.end(), target.sshOptions.begin(), target.sshOptions.end());
    argv.push_back("--");
    argv.push_back(target.host);
    argv.push_back(serverCommand(target.server));
    return argv;
}

// ---------------------------------------------------------------- askpass

Result<std::unique_ptr<AskpassServer>> AskpassServer::start(AskpassHook hook)
{
    std::unique_ptr<AskpassServer> s(new AskpassServer);
    s->m_hook = std::move(hook);
    const char *tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardscope-askpass-XXXXXX";
    if (!::mkdtemp(templ.data())) // mode 0700: only this user reaches the socket
        return makeError(Error::Code::Io, std::string("mkdtemp: ") + std::strerror(errno))
            .inFile(templ);
    s->m_dir = templ;
    s->m_path = templ + "/socket";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (s->m_path.size() >= sizeof addr.sun_path)
        return makeError(Error::Code::Io, "the askpass socket's path is too long")
            .inFile(s->m_path);
    std::memcpy(addr.sun_path, s->m_path.c_str(), s->m_path.size() + 1);
    s->m_listen = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->m_listen < 0 || ::bind(s->m_listen, reinterpret_cast<sockaddr *>(&addr), sizeof addr) ||
        ::listen(s->m_listen, 4) || ::pipe2(s->m_wake, O_CLOEXEC))
        return makeError(Error::Code::Io, std::string("askpass socket: ") + std::strerror(errno))
            .inFile(s->m_path);
    s->m_thread = std::thread([p = s.get()] { p->serve(); });
    return s;
}

AskpassServer::~AskpassServer()
{
    if (m_wake[1] >= 0) {
        [[maybe_unused]] auto n = ::write(m_wake[1], "x", 1);
    }
    if (m_thread.joinable())
        m_thread.join();
    for (int fd : {m_listen, m_wake[0], m_wake[1]})
        if (fd >= 0)
            ::close(fd);
    if (!m_path.empty())
        ::unlink(m_path.c_str());
    if (!m_dir.empty())
        ::rmdir(m_dir.c_str());
}

void AskpassServer::serve()
{
    for (;;) {
        pollfd fds[2] = {{m_listen, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (fds[1].revents)
            return;
        const int c = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        std::string prompt;
        char buf[4096];
        ssize_t n;
        while (prompt.size() < (64 << 10) && (n = ::read(c, buf, sizeof buf)) > 0)
            prompt.append(buf, size_t(n));
        const std::optional<std::string> answer = m_hook ? m_hook(prompt) : std::nullopt;
        const std::string reply = answer ? "1" + *answer : "0";
        [[maybe_unused]] auto w = ::write(c, reply.data(), reply.size());
        ::close(c);
    }
}

// ---------------------------------------------------------------- ssh

Result<std::unique_ptr<SshProcess>> SshProcess::spawn(const std::vector<std::string> &args,
                                                      const AskpassServer *askpass)
{
    if (args[0].find('/') == std::string::npos && findOnPath(args[0]).empty())
        return makeError(Error::Code::NotFound, "no " + args[0] +
                                                    " on PATH: ShardScope "
                                                    "connects through the system's OpenSSH client");
    int sv[2], err[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return makeError(Error::Code::Io, std::string("socketpair: ") + std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
        ::close(sv[0]);
        ::close(sv[1]);
        return makeError(Error::Code::Io, std::string("pipe: ") + std::strerror(errno));
    }
    // Everything the child needs, made before fork(): after it, only exec.
    std::vector<std::string> env;
    for (char **e = environ; *e; ++e) {
        const std::string_view v(*e);
        if (askpass && (v.starts_with("SSH_ASKPASS=") || v.starts_with("SSH_ASKPASS_REQUIRE=") ||
                        v.starts_with("SHARDSCOPE_ASKPASS=")))
            continue;
        env.emplace_back(v);
    }
    if (askpass) {
        env.push_back("SSH_ASKPASS=" + selfExecutable());
        env.push_back("SSH_ASKPASS_REQUIRE=force"); // OpenSSH 8.4: even with a terminal
        env.push_back("SHARDSCOPE_ASKPASS=" + askpass->socketPath());
        if (!std::getenv("DISPLAY")) // older ssh asks askpass only with a display
            env.push_back("DISPLAY=shardscope-askpass:0");
    }
    std::vector<std::string> argv = args;
    std::vector<char *> av, ev;
    for (std::string &a : argv)
        av.push_back(a.data());
    av.push_back(nullptr);
    for (std::string &e : env)
        ev.push_back(e.data());
    ev.push_back(nullptr);

    const pid_t pid = ::fork();
    if (pid < 0) {
        for (int fd : {sv[0], sv[1], err[0], err[1]})
            ::close(fd);
        return makeError(Error::Code::Io, std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
        // Ctrl-C is the client's to turn into a cancel: ssh, which leaves an ignored SIGINT
        // ignored, stays up for it. It keeps the terminal, to ask for a password there.
        std::signal(SIGINT, SIG_IGN);
        std::signal(SIGPIPE, SIG_DFL);
        ::dup2(sv[1], 0);
        ::dup2(sv[1], 1);
        ::dup2(err[1], 2);
        ::execvpe(av[0], av.data(), ev.data());
        const char message[] = "ssh could not be started\n";
        [[maybe_unused]] auto n = ::write(2, message, sizeof message - 1);
        ::_exit(127);
    }
    ::close(sv[1]);
    ::close(err[1]);
    std::unique_ptr<SshProcess> p(new SshProcess);
    p->m_pid = pid;
    p->m_fd = sv[0];
    p->m_err = err[0];
    p->m_errThread = std::thread([q = p.get()] {
        struct Ended
        {
            std::atomic<bool> &ended;
            ~Ended() { ended = true; }
        } ended{q->m_errEnded};
        char buf[4096];
        for (;;) {
            pollfd fd{q->m_err, POLLIN, 0};
            const int r = ::poll(&fd, 1, 200);
            if (r < 0 && errno != EINTR)
                return;
            if (q->m_stop.load())
                return;
            if (r <= 0)
                continue;
            const ssize_t n = ::read(q->m_err, buf, sizeof buf);
            if (n <= 0)
                return;
            std::lock_guard lock(q->m_mutex);
            q->m_tail.append(buf, size_t(n));
            if (q->m_tail.size() > 16384)
                q->m_tail.erase(0, q->m_tail.size() - 8192);
        }
    });
    return p;
}

std::string SshProcess::lastLine() const
{
    std::lock_guard lock(m_mutex);
    size_t end = m_tail.size();
    while (end > 0) {
        while (end > 0 && (m_tail[end - 1] == '\n' || m_tail[end - 1] == '\r'))
            --end;
        const size_t start = m_tail.rfind('\n', end ? end - 1 : 0);
        const size_t from = start == std::string::npos || end == 0 ? 0 : start + 1;
        std::string line = m_tail.substr(from, end - from);
        if (line.find_first_not_of(" \t\r") != std::string::npos)
            return line;
        if (from == 0)
            break;
        end = from;
    }
    return {};
}

void SshProcess::waitForStderrEnd(double seconds) const
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!m_errEnded.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::string SshProcess::exitText(double seconds)
{
    std::lock_guard wait(m_waitMutex);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (m_status < 0) {
        int status = 0;
        const pid_t r = ::waitpid(m_pid, &status, WNOHANG);
        if (r == m_pid) {
            m_status = status;
            break;
        }
        if (r < 0 || std::chrono::steady_clock::now() >= until)
            return {};
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (WIFEXITED(m_status))
        return "ssh exited with status " + std::to_string(WEXITSTATUS(m_status));
    return "ssh was killed by signal " + std::to_string(WTERMSIG(m_status));
}

void SshProcess::closeInput()
{
    if (m_fd >= 0)
        ::shutdown(m_fd, SHUT_WR);
}

void SshProcess::stopReading()
{
    if (m_fd >= 0)
        ::shutdown(m_fd, SHUT_RD);
}

void SshProcess::kill()
{
    std::lock_guard wait(m_waitMutex);
    if (m_pid > 0 && m_status < 0)
        ::kill(m_pid, SIGTERM);
}

SshProcess::~SshProcess()
{
    closeInput();
    if (exitText(2).empty()) {
        kill();
        if (exitText(1).empty()) {
            ::kill(m_pid, SIGKILL);
            (void)exitText(5);
        }
    }
    m_stop = true;
    if (m_errThread.joinable())
        m_errThread.join();
    if (m_fd >= 0)
        ::close(m_fd);
    if (m_err >= 0)
        ::close(m_err);
}

} // namespace detail::remote

std::optional<int> runAskpassHelper(int argc, char **argv)
{
    // ssh runs its askpass with one argument, the prompt.
    const char *path = std::getenv("SHARDSCOPE_ASKPASS");
    if (!path || !*path || argc > 2)
        return std::nullopt;
    const std::string prompt = argc > 1 ? argv[1] : "";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (std::strlen(path) >= sizeof addr.sun_path)
        return 1;
    std::strcpy(addr.sun_path, path);
    const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0)
        return 1;
    for (size_t at = 0; at < prompt.size();) {
        const ssize_t n = ::write(s, prompt.data() + at, prompt.size() - at);
        if (n <= 0)
            return 1;
        at += size_t(n);
    }
    ::shutdown(s, SHUT_WR);
    std::string reply;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(s, buf, sizeof buf)) > 0)
        reply.append(buf, size_t(n));
    ::close(s);
    if (reply.empty() || reply[0] != '1')
        return 1; // refused: ssh gives up on this way in
    reply = reply.substr(1) + "\n";
    for (size_t at = 0; at < reply.size();) {
        const ssize_t w = ::write(1, reply.data() + at, reply.size() - at);
        if (w <= 0)
            return 1;
        at += size_t(w);
    }
    return 0;
}

} // namespace shardscope
