// SPDX-License-Identifier: MIT
// The front door on another host: `shardscope-cli serve --stdio` run there through the system's
// ssh (so ProxyJump, ControlMaster, keys, agents and 2FA work as the user configured them),
// speaking a versioned protocol on its stdin and stdout. Nothing listens anywhere. Jobs run
// where the data is; their results come back as the same types session.h returns, so that a
// face shows a remote checkpoint as it shows a local one. docs/architecture.md ("Remote") has
// the protocol.
#pragma once

#include "shardscope/session.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** Where a remote session goes. */
struct RemoteTarget
{
    /** What ssh connects to: [user@]host, or an alias of ~/.ssh/config. */
    std::string host;
    int port = 0; ///< 0: ssh's own choice (its config, or 22)
    /** The server command on the remote host: `shardscope-cli` from its PATH, or a path (a
     *  leading `~/` is the remote home), or a wrapper that loads modules first. */
    std::string server = "shardscope-cli";
    /** More ssh arguments, before the destination (tests: -F FILE). */
    std::vector<std::string> sshOptions;

    /** "[user@]host[:port]" as the user gives it (`--ssh`); refused when it could be taken for
     *  an ssh option. */
    static Result<RemoteTarget> parse(std::string_view destination);
    /** How the user named it, for titles and messages: "user@host" or "host:2222". */
    std::string name() const;
};

/**
 * A checkpoint on another host named in one argument, where a command takes two checkpoints
 * (diff --against, the window's Compare With…), each here or on any host:
 * `ssh://[user@]host[:port]/path` or scp's `[user@]host[:port]:/path` (the path absolute there;
 * a path here of that form is written `./host:/path`).
 */
struct RemoteLocation
{
    RemoteTarget target;
    std::string path; ///< the remote host's
    /** nullopt: `text` names a path here; an error: it has the form but no valid host or path. */
    static std::optional<Result<RemoteLocation>> parse(std::string_view text);
    /** "host:/path", as RemoteSession::where() says it. */
    std::string name() const;
};

/**
 * Where a repair whose layout travelled from the client (a file there, not on the server's
 * host) writes that layout: beside OUT, as OUT.layout.json, as the window writes a generated
 * layout beside a local repair, so that the manifest's command runs on the server's host.
 */
std::string layoutBesideOutput(const std::string &output);

/**
 * Answers a prompt of ssh's (a password, a 2FA code, a key's passphrase, a new host key's
 * fingerprint): the text typed, or nullopt to refuse. Called on a thread of the session's while
 * it connects; ssh waits for it.
 */
using AskpassHook = std::function<std::optional<std::string>(const std::string &prompt)>;

struct RemoteConnectOptions
{
    /** Empty: ssh asks on the terminal, or through the user's own SSH_ASKPASS, as it would. */
    AskpassHook askpass;
    /** Progress ("connect") while ssh connects, and cancel. */
    JobControl control;
    /** Until the server's hello: long enough for a 2FA code typed from a phone. */
    int timeoutSeconds = 300;
    /** The server reads and writes no persistent index (the CLI's --no-cache). */
    bool noCache = false;
};

/** What the server said of itself. */
struct RemoteServerInfo
{
    std::string version;    ///< its ShardScope version
    int major = 0;          ///< its protocol major (equal to ours)
    int minor = 0;          ///< the minor both speak
    std::string host;       ///< its host name
    std::string executable; ///< the binary that answered
    int64_t pid = 0;
    /** Threads a job runs on there when a request leaves it to the server: the CPUs it may
     *  use (affinity, the cgroup's quota), at most 8 on a shared login node. */
    int threads = 1;
    uint64_t memoryBytes = 0; ///< a quarter of what the cgroup or the machine allows
    bool srun = false;        ///< Slurm's srun is on its PATH
    bool torchrun = false;    ///< torchrun is on its PATH
};

/**
 * verify as a job of several processes that the server launches: `srun` where Slurm is
 * (nodes, ranks, partition, time limit, account), `torchrun` on one node otherwise. The ranks
 * run `shardscope-cli verify --json`; rank 0's progress and result come back.
 */
struct RemoteLaunch
{
    enum class Launcher : uint8_t { None, Auto, Srun, Torchrun };
    Launcher launcher = Launcher::None; ///< None: verify in the server's process
    int nodes = 1;
    int ranks = 1; ///< processes in all
    std::string partition, timeLimit, account;
    std::string backend = "auto"; ///< the collectives': gloo, nccl or auto
};

/** One tensor's health and hash, read and computed next to the data. */
struct RemoteTensorDetails
{
    std::optional<TensorHealth> health;
    std::string healthError; ///< why there is no health (a dtype without statistics)
    std::string sha256;
    uint64_t bytes = 0; ///< the tensor's bytes the server read
};

/** One entry of a directory on the remote host (RemoteSession::listDirectory). */
struct RemoteDirEntry
{
    enum class Kind : uint8_t { File, Directory, Other };
    std::string name;
    Kind kind = Kind::Other; ///< what a symbolic link points to (Other when it points nowhere)
    bool link = false;       ///< a symbolic link
    uint64_t size = 0;       ///< a file's bytes
    /** Looks like a checkpoint to open: a directory holding a DCP `.metadata`, `mp_rank_*`
     *  directories, Megatron's `latest_checkpointed_iteration.txt` or safetensors, an
     *  `mp_rank_*` directory, a .safetensors, .pt, .pth or .bin
     *  file. A guess from names, for the eye: opening decides. */
    bool checkpoint = false;
};

/** A directory on the remote host, read by its server: the names only, nothing opened. */
struct RemoteListing
{
    std::string path;                    ///< absolute, symbolic links resolved (its parent is "Up")
    bool checkpoint = false;             ///< the directory itself looks like a checkpoint
    std::vector<RemoteDirEntry> entries; ///< directories first, then by name
    size_t leftOut = 0; ///< entries past the listing's bound, or whose names are not UTF-8
};

/**
 * A connection to a server. Its calls are the front door's (same requests, same results) and
 * may come from several threads at once: each is one request, and the replies interleave.
 * `progress` is called on the calling thread; a cancel (the request's CancelToken, or progress
 * returning false) is sent to the server, which stops the job and answers as a local run would
 * (a verify's result with `cancelled` set, or Error::Code::Cancelled).
 *
 * When the connection drops, every pending and later call fails with one line saying so; what
 * a caller already holds stays valid. Reconnecting is opening a new session: nothing is
 * replayed (a fix writes files).
 */
class RemoteSession
{
public:
    static Result<std::shared_ptr<RemoteSession>> connect(const RemoteTarget &target,
                                                          const RemoteConnectOptions &options = {});
    ~RemoteSession(); ///< closes the connection: the server ends with its stdin
    RemoteSession(const RemoteSession &) = delete;
    RemoteSession &operator=(const RemoteSession &) = delete;

    const RemoteTarget &target() const;
    const RemoteServerInfo &server() const;
    /** "host:/path": where a remote checkpoint lives (titles, recent files, the status bar). */
    std::string where(const std::string &path) const;
    /** False once the connection is gone; lostError() says how. */
    bool connected() const;
    Error lostError() const;
    /** Bytes sent and received on the stream (the protocol's, inside ssh). */
    uint64_t bytesSent() const;
    uint64_t bytesReceived() const;

    /**
     * Opens a checkpoint on the remote host. Its index travels once, zstd-compressed (the
     * persistent index's entry, on the wire); the session keeps it, and requests that name
     * this path (or carry this index as `opened`) use the server's open index. Progress:
     * "open" while the server reads it, "receive" (bytes) while it travels, "check" while the
     * server checks the data files after it sent the keys.
     *
     * `onKeysKnown` (as OpenOptions'): where the server holds a persistent index entry for the
     * metadata as it is now, that entry comes (or, when this side kept it, is named) before the
     * server's open, and the index it makes is passed here first: keys, shapes and chunks that
     * are current, with the sizes, problems and info of the last open here (none when it was
     * not kept) until open() returns the index as the whole open there found it.
     */
    Result<OpenedIndex> open(const std::string &path, const JobControl &control = {},
                             const std::function<void(const CheckpointIndex &)> &onKeysKnown = {});
    /** Forgets an index open() returned, here and on the server (which also forgets it when
     *  the last copy here goes). */
    void release(const OpenedIndex &index);

    // The front door (session.h), run on the remote host. Paths are the remote host's. A
    // request's `openedLayout` travels with it (a layout file read here, or built from a config
    // here); its `layout` path is only read remotely when there is none. A request's `opened`
    // must be an index this session's open() returned.
    Result<InspectResult> runInspect(const InspectRequest &request, const JobControl &control = {});
    Result<DiffResult> runDiff(const DiffRequest &request, const JobControl &control = {});
    Result<CheckpointDiff> runCheckpointDiff(const CheckpointDiffRequest &request,
                                             const JobControl &control = {});
    Result<ValueDiffResult> runValueDiff(const ValueDiffRequest &request,
                                         const JobControl &control = {});
    /** In the server's process, or as a job it launches (`launch`). */
    Result<VerifyReport> runVerify(const VerifyRequest &request, const JobControl &control = {},
                                   const RemoteLaunch &launch = {});
    /** The report rendered remotely; the caller writes it where it wants (locally). */
    Result<ReportOutput> runReport(const ReportRequest &request, const JobControl &control = {});
    /** Written on the remote host, beside the source. The result's `index` (the output's) is
     *  not sent: open() it to show it. */
    Result<FixResult> runFix(const FixRequest &request, const JobControl &control = {});

    /** A directory there (empty: the remote home), for a face's file browser. The server
     *  reads its names and each entry's kind and size; it opens no file. */
    Result<RemoteListing> listDirectory(const std::string &path, const JobControl &control = {});

    /** One tensor of an index open() returned (an entry of it): read, its health computed
     *  and hashed there. The server finds it by its place in the index, without a search. */
    Result<RemoteTensorDetails> tensorDetails(const OpenedIndex &index, const TensorEntry &tensor,
                                              const JobControl &control = {});
    /** One non-tensor entry of an index open() returned, decoded there (the safe pickle
     *  decoder). */
    Result<PyValue> readObject(const OpenedIndex &index, const ObjectEntry &object,
                               const JobControl &control = {});

    struct Impl;

private:
    explicit RemoteSession(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> m;
};

/**
 * `shardscope-cli serve --stdio`: serves one client on stdin and stdout until it closes them,
 * then returns the exit code. It writes nothing but `fix`'s output and the user's cache (the
 * persistent index; a launched job's layout, removed when the job ends) and runs nothing but
 * the jobs the protocol names.
 */
int serveStdio();

/**
 * The askpass helper: when a session with an AskpassHook starts ssh, SSH_ASKPASS is the running
 * program itself, with SHARDSCOPE_ASKPASS set. A main() calls this first: it returns the exit
 * code when the process is that helper (the prompt sent to the hook, the answer printed for
 * ssh), and nullopt otherwise.
 */
std::optional<int> runAskpassHelper(int argc, char **argv);

} // namespace shardscope
