// SPDX-License-Identifier: MIT
// The client's transport: the system's ssh, run with the server as its command, its stdin and
// stdout one end of a socket pair. ssh authenticates as the user configured it; a prompt it
// shows goes to the terminal, to the user's SSH_ASKPASS, or (when the caller gives a hook) to an
// askpass helper that asks the hook over a socket in a private directory.
#pragma once

#include "shardscope/remote.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace shardscope::detail::remote {

/** The remote command: `exec SERVER serve --stdio`, SERVER one shell word (`~/` kept). */
std::string serverCommand(const std::string &server);

/** The ssh command line for `target` (SHARDSCOPE_SSH names another ssh program). */
std::vector<std::string> sshCommand(const RemoteTarget &target);

/** Answers ssh's askpass helper with a hook, while it lives. */
class AskpassServer
{
public:
    static Result<std::unique_ptr<AskpassServer>> start(AskpassHook hook);
    ~AskpassServer();
    const std::string &socketPath() const { return m_path; }

private:
    AskpassServer() = default;
    void serve();
    AskpassHook m_hook;
    std::string m_dir, m_path;
    int m_listen = -1;
    int m_wake[2] = {-1, -1};
    std::thread m_thread;
};

/** A running ssh: the socket to the server, and what it says on stderr (the last lines). */
class SshProcess
{
public:
    /** Starts `argv`; with `askpass`, ssh asks it for every prompt. */
    static Result<std::unique_ptr<SshProcess>> spawn(const std::vector<std::string> &argv,
                                                     const AskpassServer *askpass);
    ~SshProcess(); ///< closes the socket, waits a moment for ssh, then stops it
    int fd() const { return m_fd; }
    /** Its stderr's last non-empty line (why it failed), or empty. */
    std::string lastLine() const;
    /** Waits until ssh's stderr is read to its end (ssh gone), at most `seconds`: its last
     *  words arrive after the connection closed. */
    void waitForStderrEnd(double seconds) const;
    /** Its exit after the stream ended: "ssh exited with status N" or "…killed by signal N",
     *  waiting at most `seconds`; empty while it runs. */
    std::string exitText(double seconds);
    /** Closes our end for writing: the server sees the end of its stdin. */
    void closeInput();
    /** Ends reading: a read of the socket returns the end of the stream. */
    void stopReading();
    void kill();

private:
    SshProcess() = default;
    pid_t m_pid = -1;
    int m_fd = -1;
    int m_err = -1;
    std::thread m_errThread;
    std::atomic<bool> m_stop{false};
    std::atomic<bool> m_errEnded{false};
    std::mutex m_waitMutex; ///< exitText() from the reader and the owner
    mutable std::mutex m_mutex;
    std::string m_tail;
    int m_status = -1;
};

} // namespace shardscope::detail::remote
