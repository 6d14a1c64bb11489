// SPDX-License-Identifier: MIT
// RemoteSession: the client of `shardscope-cli serve --stdio`, through ssh.
#include "remote/clientcache.h"
#include "remote/codec.h"
#include "remote/listing.h"
#include "remote/ssh.h"
#include "remote/wire.h"
#include "shardscope/escape.h"
#include "shardscope/remote.h"
#include "shardscope/version.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace shardscope {

using namespace detail::remote;

namespace {

/** A message for one request: a control object and, when it announced one, its blob. */
struct Message
{
    json control;
    Bytes blob;
};

/** How long a cancelled job may take to answer before the call gives up on it. */
constexpr auto kCancelGrace = std::chrono::seconds(10);

} // namespace

struct RemoteSession::Impl
{
    RemoteTarget target;
    RemoteServerInfo info;
    std::unique_ptr<SshProcess> ssh;
    std::unique_ptr<FrameReader> reader;
    std::unique_ptr<FrameWriter> writer;
    std::thread readerThread;

    struct Pending
    {
        std::deque<Message> queue;
        json blobControl;
        std::unique_ptr<BlobReceiver> blob;
        uint64_t noticed = 0; ///< bytes received when "receive" progress was last queued
    };
    mutable std::mutex mutex;
    std::condition_variable cv;
    std::map<uint32_t, Pending> pending;
    std::optional<Error> lost;
    uint32_t nextId = 1;
    /** The indexes open() returned, by address (checked against the living index: an address
     *  can be reused once an index is gone). */
    std::map<const CheckpointIndex *, std::pair<std::weak_ptr<const CheckpointIndex>, int64_t>>
        handles;
    std::weak_ptr<Impl> self;

    ~Impl();
    void readLoop();
    void fail(const std::string &why);
    Error lostError(const char *during) const;
    Result<Message> call(const std::string &op, const json &args, const JobControl &control,
                         const std::string &what, std::vector<Message> *extras = nullptr,
                         const std::function<void(Message &)> &onEntry = {});
    json handleOf(const OpenedIndex &index) const;
    /** A kept index decoded ahead, while the server opens (its identity, and the entry). */
    struct Guess
    {
        std::string identity;
        std::string header; ///< the kept one's, once `entry` is ready (declared first: the
                            ///< future's destructor waits for the thread that writes it)
        std::future<Result<std::shared_ptr<CheckpointIndex>>> entry;
    };
    /** The entry the server sent (or named, when it is kept here) ahead of its open. */
    struct Early
    {
        std::string entry; ///< its checksum: an identity's second part
        std::shared_ptr<CheckpointIndex> index;
        std::shared_ptr<Bytes> bytes; ///< as received (to be kept); null when it was kept here
        std::optional<Error> error;
    };
    void takeEntry(Message &m, const std::string &origin, const ClientIndexCache &cache,
                   Guess &guess, Early &early);
    Result<std::shared_ptr<const CheckpointIndex>> takeIndex(Message &m, const std::string &origin,
                                                             const ClientIndexCache &cache,
                                                             Guess *guess = nullptr,
                                                             Early *early = nullptr);
    template<typename T>
    Result<T> resultOf(const Message &m);
};

RemoteSession::Impl::~Impl()
{
    if (ssh) {
        ssh->closeInput(); // the server sees the end of its stdin and exits, and ssh with it
        (void)ssh->exitText(3);
        ssh->stopReading(); // whatever ssh does, the reader returns
    }
    if (readerThread.joinable())
        readerThread.join();
}

void RemoteSession::Impl::fail(const std::string &why)
{
    std::lock_guard lock(mutex);
    if (!lost)
        lost = makeError(Error::Code::Io, why);
    cv.notify_all();
}

Error RemoteSession::Impl::lostError(const char *during) const
{
    std::lock_guard lock(mutex);
    Error e = *lost;
    e.message = "the connection to " + target.name() + " was lost" +
                (during && *during ? std::string(" during ") + during : std::string()) + " (" +
                e.message + "); reconnect to go on";
    return e;
}

void RemoteSession::Impl::readLoop()
{
    for (;;) {
        auto f = reader->next();
        if (!f) {
            // Why the stream ended: the server's or ssh's last word, or how ssh ended.
            std::string why = f.error().message;
            if (why == "closed") {
                const std::string exit = ssh->exitText(2);
                const std::string last = ssh->lastLine();
                why = !last.empty()  ? visibleText(last)
                      : exit.empty() ? std::string("the stream closed")
                                     : "the server ended; " + exit;
            }
            fail(why);
            return;
        }
        std::lock_guard lock(mutex);
        auto it = pending.find(f->id);
        if (f->kind == FrameKind::Control) {
            auto j = parseControl(f->payload);
            if (!j) {
                lost = j.error();
                cv.notify_all();
                return;
            }
            if (it == pending.end())
                continue; // a request given up on
            if (j->contains("blob")) {
                const json &b = (*j)["blob"];
                if (!b.is_object() || !b.contains("raw") || !b["raw"].is_number_unsigned()) {
                    lost = makeError(Error::Code::Format, "a blob announced without its size");
                    cv.notify_all();
                    return;
                }
                it->second.blob = std::make_unique<BlobReceiver>(b["raw"].get<uint64_t>());
                it->second.blobControl = std::move(*j);
                it->second.noticed = 0;
            } else {
                it->second.queue.push_back({std::move(*j), {}});
                cv.notify_all();
            }
            continue;
        }
        if (it == pending.end() || !it->second.blob)
            continue;
        Pending &p = it->second;
        if (f->kind == FrameKind::BlobChunk) {
            if (auto s = p.blob->chunk(f->payload); !s) {
                lost = s.error();
                cv.notify_all();
                return;
            }
            // What the caller waits for is said: the bytes of a large result as they come.
            if (p.blob->produced() - p.noticed >= (8 << 20)) {
                p.noticed = p.blob->produced();
                p.queue.push_back({{{"type", "progress"},
                                    {"stage", "receive"},
                                    {"done", p.blob->produced()},
                                    {"total", p.blob->raw()}},
                                   {}});
                cv.notify_all();
            }
            continue;
        }
        auto bytes = p.blob->finish(f->payload);
        p.blob.reset();
        if (!bytes) {
            lost = bytes.error();
            cv.notify_all();
            return;
        }
        p.queue.push_back({std::move(p.blobControl), std::move(*bytes)});
        cv.notify_all();
    }
}

Result<Message> RemoteSession::Impl::call(const std::string &op, const json &args,
                                          const JobControl &control, const std::string &what,
                                          std::vector<Message> *extras,
                                          const std::function<void(Message &)> &onEntry)
{
    uint32_t id;
    {
        std::unique_lock lock(mutex);
        if (lost) { // lost before this request: said as a loss during it, as below
            lock.unlock();
            return lostError(what.c_str());
        }
        id = nextId++;
        pending[id];
    }
    struct Forget
    {
        Impl *impl;
        uint32_t id;
        ~Forget()
        {
            std::lock_guard lock(impl->mutex);
            impl->pending.erase(id);
        }
    } forget{this, id};
    if (auto s = writer->controlWithBlob(id, {{"type", "request"}, {"op", op}}, toPack(args)); !s) {
        fail(s.error().message);
        return lostError(what.c_str());
    }
    bool cancelSent = false;
    std::chrono::steady_clock::time_point cancelAt;
    auto cancel = [&] {
        if (cancelSent)
            return;
        cancelSent = true;
        cancelAt = std::chrono::steady_clock::now();
        if (!writer->control(id, {{"type", "cancel"}}))
            fail("the cancel could not be sent");
    };
    std::string stage; // a progress's stage outlives the call that reports it
    for (;;) {
        std::unique_lock lock(mutex);
        Pending &p = pending[id];
        cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !p.queue.empty() || lost; });
        if (p.queue.empty()) {
            if (lost) {
                lock.unlock();
                return lostError(what.c_str());
            }
            lock.unlock();
            if (control.cancel.cancelled())
                cancel();
            if (cancelSent && std::chrono::steady_clock::now() - cancelAt > kCancelGrace)
                return makeError(Error::Code::Cancelled,
                                 "cancelled: the server did not stop the " + what +
                                     " within 10 s; it is left to end on its own");
            continue;
        }
        Message m = std::move(p.queue.front());
        p.queue.pop_front();
        lock.unlock();
        const std::string type = m.control.value("type", "");
        if (type == "progress") {
            stage = m.control.value("stage", "");
            const JobProgress progress{stage, m.control.value("done", uint64_t(0)),
                                       m.control.value("total", uint64_t(0))};
            if (!cancelSent && !control.report(progress))
                cancel();
        } else if (type == "entry" && onEntry) {
            onEntry(m);
        } else if (type == "index" && extras) {
            extras->push_back(std::move(m));
        } else if (type == "result") {
            return m;
        } else if (type == "error") {
            auto packed = fromPack(m.blob.view());
            if (!packed)
                return packed.error();
            return errorFromJson(*packed);
        }
    }
}

json RemoteSession::Impl::handleOf(const OpenedIndex &index) const
{
    if (!index)
        return nullptr;
    std::lock_guard lock(mutex);
    auto it = handles.find(index.get());
    if (it == handles.end() || it->second.first.lock() != index)
        return nullptr;
    return it->second.second;
}

Result<std::shared_ptr<const CheckpointIndex>>
RemoteSession::Impl::takeIndex(Message &m, const std::string &origin, const ClientIndexCache &cache,
                               Guess *guess, Early *early)
{
    const std::string identity = m.control.value("identity", "");
    Result<std::shared_ptr<const CheckpointIndex>> decoded =
        makeError(Error::Code::Internal, "no index");
    const auto t0 = std::chrono::steady_clock::now();
    struct Timing
    {
        std::chrono::steady_clock::time_point t0;
        ~Timing()
        {
            if (std::getenv("SHARDSCOPE_TIMING"))
                std::fprintf(
                    stderr, "timing: client: index decoded in %.3f s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    } timing{t0};
    // An index not taken is let go on the server too (a kept one that did not check is asked
    // for again, under another handle).
    const int64_t handle = m.control.value("handle", int64_t(0));
    struct Release
    {
        Impl *impl;
        int64_t handle;
        bool taken = false;
        ~Release()
        {
            if (!taken && handle)
                (void)impl->writer->control(0, {{"type", "release"}, {"handle", handle}});
        }
    } release{this, handle};
    const bool held = m.control.value("held", false), sent = m.control.value("entry_sent", false);
    if ((held || sent) && early && early->index && entryPartOf(identity) == early->entry) {
        // The entry that came ahead (shown already, its keys current): the header of the
        // server's whole open now, its sizes, kinds and info.
        if (auto s = applyIndexHeader(m.blob.view(), *early->index, origin); !s)
            return s.error();
        decoded = std::shared_ptr<const CheckpointIndex>(std::move(early->index));
        if (!held && early->bytes && !identity.empty())
            cache.store(identity, std::string(m.blob.view()), early->bytes->view(), early->bytes);
    } else if (sent) {
        if (early && early->error)
            return *early->error;
        return makeError(Error::Code::Format, "the server named an entry it did not send")
            .inFile(origin);
    } else if (held && guess && guess->entry.valid() && guess->identity == identity) {
        // The one decoded while the server opened: its header now.
        auto entry = guess->entry.get();
        if (!entry)
            return entry.error();
        if (auto s = applyIndexHeader(m.blob.view(), **entry, origin); !s)
            return s.error();
        decoded = std::shared_ptr<const CheckpointIndex>(std::move(*entry));
    } else if (held) {
        // Ours already: the server sent its header alone, the entry is the one kept here.
        auto entry = cache.open(identity, origin);
        if (!entry)
            return entry.error();
        if (auto s = applyIndexHeader(m.blob.view(), **entry, origin); !s)
            return s.error();
        decoded = std::shared_ptr<const CheckpointIndex>(std::move(*entry));
    } else {
        decoded = decodeIndexBlob(m.blob.view(), origin);
        if (decoded && !identity.empty()) {
            auto bytes = std::make_shared<Bytes>(std::move(m.blob));
            cache.store(identity, bytes->view(), bytes);
        }
    }
    if (!decoded)
        return decoded.error();
    // When the last copy here goes, the server lets its own go.
    release.taken = true;
    std::shared_ptr<const CheckpointIndex> index(
        decoded->get(), [held = *decoded, session = self, handle](const CheckpointIndex *) {
            if (auto s = session.lock()) {
                {
                    std::lock_guard lock(s->mutex);
                    if (s->lost)
                        return;
                }
                (void)s->writer->control(0, {{"type", "release"}, {"handle", handle}});
            }
        });
    std::lock_guard lock(mutex);
    handles[index.get()] = {index, handle};
    return index;
}

void RemoteSession::Impl::takeEntry(Message &m, const std::string &origin,
                                    const ClientIndexCache &cache, Guess &guess, Early &early)
{
    early.entry = m.control.value("entry", "");
    const json held = m.control.value("held", json());
    const auto t0 = std::chrono::steady_clock::now();
    struct Timing
    {
        std::chrono::steady_clock::time_point t0;
        bool held;
        ~Timing()
        {
            if (std::getenv("SHARDSCOPE_TIMING"))
                std::fprintf(
                    stderr, "timing: client: the entry ahead (%s) decoded in %.3f s\n",
                    held ? "kept here" : "sent",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    } timing{t0, held.is_string()};
    Result<std::shared_ptr<CheckpointIndex>> entry = makeError(Error::Code::Internal, "none");
    if (held.is_string()) {
        // Kept here: decoded while the server looked it up (the newest kept one), else now;
        // with the header of the open it came from until the server's own comes.
        const std::string id = held.get<std::string>();
        std::string header;
        if (guess.entry.valid() && guess.identity == id) {
            entry = guess.entry.get();
            header = std::move(guess.header);
        } else {
            entry = cache.open(id, origin, &header);
        }
        if (entry && !header.empty())
            if (auto s = applyIndexHeader(header, **entry, origin); !s)
                entry = s.error();
    } else {
        auto bytes = std::make_shared<Bytes>(std::move(m.blob));
        entry = decodeIndexEntry(bytes->view(), origin, 0, false);
        if (entry) {
            (*entry)->inputPath = origin;
            (*entry)->dataDir = origin;
            early.bytes = std::move(bytes);
        }
    }
    if (!entry) {
        early.error = entry.error();
        return;
    }
    early.index = std::move(*entry);
}

template<typename T>
Result<T> RemoteSession::Impl::resultOf(const Message &m)
{
    auto packed = fromPack(m.blob.view());
    if (!packed)
        return packed.error();
    return fromJson<T>(*packed);
}

// ---------------------------------------------------------------- connecting

RemoteSession::RemoteSession(std::shared_ptr<Impl> impl)
    : m(std::move(impl))
{}

RemoteSession::~RemoteSession() = default;

Result<std::shared_ptr<RemoteSession>> RemoteSession::connect(const RemoteTarget &target,
                                                              const RemoteConnectOptions &options)
{
    if (target.host.empty() || target.host.front() == '-')
        return makeError(Error::Code::Format, "no host to connect to");
    auto impl = std::make_shared<Impl>();
    impl->self = impl;
    impl->target = target;
    std::unique_ptr<AskpassServer> askpass;
    if (options.askpass) {
        auto a = AskpassServer::start(options.askpass);
        if (!a)
            return a.error();
        askpass = std::move(*a);
    }
    if (!options.control.report({"connect", 0, 0}))
        return makeError(Error::Code::Cancelled, "cancelled");
    auto ssh = SshProcess::spawn(sshCommand(target), askpass.get());
    if (!ssh)
        return ssh.error();
    impl->ssh = std::move(*ssh);
    impl->reader = std::make_unique<FrameReader>(impl->ssh->fd());
    impl->writer = std::make_unique<FrameWriter>(impl->ssh->fd());
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(options.timeoutSeconds);
    bool timedOut = false;
    impl->reader->setWaiter([&] {
        timedOut = std::chrono::steady_clock::now() > deadline;
        return !timedOut && options.control.report({"connect", 0, 0});
    });
    const std::string name = target.name();
    auto startFailed = [&](const Error &e, const std::string &noise) {
        if (e.code == Error::Code::Cancelled)
            return timedOut ? makeError(Error::Code::Io,
                                        "no answer from " + name + " within " +
                                            std::to_string(options.timeoutSeconds) + " s")
                            : makeError(Error::Code::Cancelled, "cancelled");
        // What ssh or the remote shell said last: "Permission denied (publickey).",
        // "…: shardscope-cli: command not found".
        if (!impl->ssh->exitText(2).empty())
            impl->ssh->waitForStderrEnd(1);
        std::string why = impl->ssh->lastLine();
        if (why.empty()) {
            const size_t end = noise.find_last_not_of("\r\n");
            if (end != std::string::npos)
                why = noise.substr(
                    noise.rfind('\n', end) == std::string::npos ? 0 : noise.rfind('\n', end) + 1,
                    end + 1);
        }
        if (why.empty())
            why = e.message;
        const bool notFound = why.find("not found") != std::string::npos ||
                              why.find("No such file") != std::string::npos;
        return makeError(
            Error::Code::Io,
            "could not start " + visibleText(target.server) + " serve on " + name + ": " +
                visibleText(why) +
                (notFound ? " (give --server PATH: where shardscope-cli is there)" : ""));
    };
    std::string noise;
    auto ready = impl->reader->readyLine(noise);
    if (!ready)
        return startFailed(ready.error(), noise);
    // "MAJOR VERSION": a server of another major cannot read our hello; say so now.
    const size_t space = ready->find(' ');
    const std::string theirMajor = ready->substr(0, space);
    const std::string theirVersion = space == std::string::npos ? "?" : ready->substr(space + 1);
    if (theirMajor != std::to_string(kWireMajor))
        return makeError(
            Error::Code::Unsupported,
            name + " runs ShardScope " + visibleText(theirVersion) + " (protocol " +
                visibleText(theirMajor) + "), this is ShardScope " + kVersion + " (protocol " +
                std::to_string(kWireMajor) +
                "): install the same version on both (server: " + visibleText(target.server) + ")");
    if (auto s = impl->writer->control(0, {{"type", "hello"},
                                           {"major", kWireMajor},
                                           {"minor", kWireMinor},
                                           {"version", kVersion},
                                           {"no_cache", options.noCache},
                                           {"capabilities", {"zstd"}}});
        !s)
        return startFailed(s.error(), noise);
    auto reply = impl->reader->next();
    if (!reply)
        return startFailed(reply.error(), noise);
    auto hello = parseControl(reply->payload);
    if (!hello)
        return hello.error();
    if ((*hello)["type"] == "refused")
        return makeError(Error::Code::Unsupported, visibleText(hello->value("message", "")));
    if ((*hello)["type"] != "hello")
        return makeError(Error::Code::Format, name + "'s server did not answer hello");
    try {
        RemoteServerInfo &i = impl->info;
        i.version = hello->at("version").get<std::string>();
        i.major = hello->at("major").get<int>();
        i.minor = hello->at("minor").get<int>();
        i.host = hello->at("host").get<std::string>();
        i.executable = hello->at("executable").get<std::string>();
        i.pid = hello->at("pid").get<int64_t>();
        i.threads = hello->at("threads").get<int>();
        i.memoryBytes = hello->at("memory").get<uint64_t>();
        i.srun = hello->at("srun").get<bool>();
        i.torchrun = hello->at("torchrun").get<bool>();
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format,
                         name + "'s server sent a hello this build cannot read (" + e.what() + ")");
    }
    impl->reader->setWaiter({});
    Impl *raw = impl.get();
    impl->readerThread = std::thread([raw] { raw->readLoop(); });
    return std::shared_ptr<RemoteSession>(new RemoteSession(std::move(impl)));
}

const RemoteTarget &RemoteSession::target() const
{
    return m->target;
}

const RemoteServerInfo &RemoteSession::server() const
{
    return m->info;
}

std::string RemoteSession::where(const std::string &path) const
{
    return m->target.name() + ":" + path;
}

bool RemoteSession::connected() const
{
    std::lock_guard lock(m->mutex);
    return !m->lost;
}

Error RemoteSession::lostError() const
{
    std::lock_guard lock(m->mutex);
    return m->lost ? *m->lost : makeError(Error::Code::Internal, "connected");
}

uint64_t RemoteSession::bytesSent() const
{
    return m->writer->bytesWritten();
}

uint64_t RemoteSession::bytesReceived() const
{
    return m->reader->bytesRead();
}

// ---------------------------------------------------------------- the front door

Result<OpenedIndex>
RemoteSession::open(const std::string &path, const JobControl &control,
                    const std::function<void(const CheckpointIndex &)> &onKeysKnown)
{
    const ClientIndexCache cache(m->target, path);
    // Twice at most: a kept index that went between asking and reading is asked for whole.
    for (bool useKept : {true, false}) {
        const std::vector<std::string> have =
            useKept ? cache.identities() : std::vector<std::string>();
        // The newest kept one is most likely the server's: decoded while the server opens.
        Impl::Guess guess;
        if (!have.empty()) {
            guess.identity = have.front();
            guess.entry = std::async(std::launch::async,
                                     [&cache, id = have.front(), path, &header = guess.header] {
                                         return cache.open(id, path, &header);
                                     });
        }
        Impl::Early early;
        auto onEntry = [&](Message &e) {
            m->takeEntry(e, path, cache, guess, early);
            if (early.index && onKeysKnown && !control.cancel.cancelled())
                onKeysKnown(*early.index);
        };
        std::vector<Message> extras;
        auto reply =
            m->call("open", {{"path", path}, {"have", have}}, control, "open", &extras, onEntry);
        if (!reply)
            return reply.error();
        if (extras.empty())
            return makeError(Error::Code::Format,
                             "the server opened " + visibleName(path) + " but sent no index");
        auto index = m->takeIndex(extras.front(), path, cache, &guess, &early);
        if (index)
            return OpenedIndex(std::move(*index));
        if (!useKept || index.error().code != Error::Code::NotFound)
            return index.error();
    }
    return makeError(Error::Code::Internal, "unreachable");
}

void RemoteSession::release(const OpenedIndex &index)
{
    const json handle = m->handleOf(index);
    if (handle.is_null())
        return;
    {
        std::lock_guard lock(m->mutex);
        m->handles.erase(index.get());
    }
    (void)m->writer->control(0, {{"type", "release"}, {"handle", handle}});
}

namespace {

json layoutArg(const std::shared_ptr<const Layout> &layout)
{
    return layout ? toJson(*layout) : json(nullptr);
}

} // namespace

Result<InspectResult> RemoteSession::runInspect(const InspectRequest &request,
                                                const JobControl &control)
{
    // Without an open index the server sends the one it ran on (not when it is ours already).
    const ClientIndexCache cache(m->target, request.path);
    Result<Message> reply = makeError(Error::Code::Internal, "not sent");
    OpenedIndex index = request.opened;
    // Twice at most: a kept index that went, or did not check, is asked for whole.
    for (bool useKept : {true, false}) {
        std::vector<Message> extras;
        const bool have = useKept && !request.opened;
        reply = m->call("inspect",
                        {{"request", toJson(request)},
                         {"opened", {m->handleOf(request.opened)}},
                         {"have", have ? cache.identities() : std::vector<std::string>()}},
                        control, "inspect", &extras);
        if (!reply)
            return reply.error();
        if (extras.empty())
            break;
        auto taken = m->takeIndex(extras.front(), request.path, cache);
        if (taken) {
            index = std::move(*taken);
            break;
        }
        if (!useKept || taken.error().code != Error::Code::NotFound)
            return taken.error();
    }
    if (!index)
        return makeError(Error::Code::Format, "the server inspected " + visibleName(request.path) +
                                                  " but sent no index");
    auto packed = fromPack(reply->blob.view());
    if (!packed)
        return packed.error();
    return inspectFromJson(*packed, std::move(index));
}

Result<DiffResult> RemoteSession::runDiff(const DiffRequest &request, const JobControl &control)
{
    auto reply = m->call("diff",
                         {{"request", toJson(request)},
                          {"layout", layoutArg(request.openedLayout)},
                          {"opened", {m->handleOf(request.opened)}}},
                         control, "diff");
    if (!reply)
        return reply.error();
    return m->resultOf<DiffResult>(*reply);
}

Result<CheckpointDiff> RemoteSession::runCheckpointDiff(const CheckpointDiffRequest &request,
                                                        const JobControl &control)
{
    auto reply =
        m->call("checkpoint_diff",
                {{"request", toJson(request)},
                 {"opened", {m->handleOf(request.firstOpened), m->handleOf(request.secondOpened)}}},
                control, "diff");
    if (!reply)
        return reply.error();
    return m->resultOf<CheckpointDiff>(*reply);
}

Result<ValueDiffResult> RemoteSession::runValueDiff(const ValueDiffRequest &request,
                                                    const JobControl &control)
{
    auto reply =
        m->call("value_diff",
                {{"request", toJson(request)},
                 {"layout", layoutArg(request.openedLayout)},
                 {"opened", {m->handleOf(request.firstOpened), m->handleOf(request.secondOpened)}}},
                control, "value comparison");
    if (!reply)
        return reply.error();
    return m->resultOf<ValueDiffResult>(*reply);
}

Result<VerifyReport> RemoteSession::runVerify(const VerifyRequest &request,
                                              const JobControl &control, const RemoteLaunch &launch)
{
    auto reply = m->call("verify",
                         {{"request", toJson(request)},
                          {"layout", layoutArg(request.openedLayout)},
                          {"opened", {m->handleOf(request.opened)}},
                          {"launch", toJson(launch)}},
                         control, "verify");
    if (!reply)
        return reply.error();
    return m->resultOf<VerifyReport>(*reply);
}

Result<ReportOutput> RemoteSession::runReport(const ReportRequest &request,
                                              const JobControl &control)
{
    json opened = json::array();
    std::shared_ptr<const Layout> layout;
    if (request.diff) {
        opened = {m->handleOf(request.diff->opened)};
        layout = request.diff->openedLayout;
    } else if (request.against) {
        opened = {m->handleOf(request.against->firstOpened),
                  m->handleOf(request.against->secondOpened)};
        if (request.values)
            layout = request.values->openedLayout;
    }
    auto reply = m->call(
        "report", {{"request", toJson(request)}, {"layout", layoutArg(layout)}, {"opened", opened}},
        control, "report");
    if (!reply)
        return reply.error();
    return m->resultOf<ReportOutput>(*reply);
}

Result<FixResult> RemoteSession::runFix(const FixRequest &request, const JobControl &control)
{
    auto reply = m->call("fix",
                         {{"request", toJson(request)},
                          {"layout", layoutArg(request.openedLayout)},
                          {"opened", {m->handleOf(request.opened)}}},
                         control, "fix");
    if (!reply)
        return reply.error();
    return m->resultOf<FixResult>(*reply);
}

namespace {

// An entry's item number in `index` (tensors first, then objects), or -1 when it is not one.
int64_t itemOf(const CheckpointIndex &index, const TensorEntry &t)
{
    const TensorEntry *base = index.tensors.data();
    return &t >= base && &t < base + index.tensors.size() ? int64_t(&t - base) : -1;
}

int64_t itemOf(const CheckpointIndex &index, const ObjectEntry &o)
{
    const ObjectEntry *base = index.objects.data();
    return &o >= base && &o < base + index.objects.size()
               ? int64_t(index.tensors.size()) + int64_t(&o - base)
               : -1;
}

} // namespace

Result<RemoteTensorDetails> RemoteSession::tensorDetails(const OpenedIndex &index,
                                                         const TensorEntry &tensor,
                                                         const JobControl &control)
{
    const json handle = m->handleOf(index);
    const int64_t item = index ? itemOf(*index, tensor) : -1;
    if (handle.is_null() || item < 0)
        return makeError(Error::Code::NotFound, "not a tensor of an index this session opened")
            .atKey(tensor.key.str());
    auto reply = m->call("tensor", {{"handle", handle}, {"item", item}, {"key", tensor.key.str()}},
                         control, "read");
    if (!reply)
        return reply.error();
    return m->resultOf<RemoteTensorDetails>(*reply);
}

Result<RemoteListing> RemoteSession::listDirectory(const std::string &path,
                                                   const JobControl &control)
{
    auto reply = m->call("list", {{"path", path}}, control, "list");
    if (!reply)
        return reply.error();
    auto packed = fromPack(reply->blob.view());
    if (!packed)
        return packed.error();
    return listingFromJson(*packed);
}

Result<PyValue> RemoteSession::readObject(const OpenedIndex &index, const ObjectEntry &object,
                                          const JobControl &control)
{
    const json handle = m->handleOf(index);
    const int64_t item = index ? itemOf(*index, object) : -1;
    if (handle.is_null() || item < 0)
        return makeError(Error::Code::NotFound, "not an object of an index this session opened")
            .atKey(object.key.str());
    auto reply = m->call("object", {{"handle", handle}, {"item", item}, {"key", object.key.str()}},
                         control, "read");
    if (!reply)
        return reply.error();
    return m->resultOf<PyValue>(*reply);
}

} // namespace shardscope
