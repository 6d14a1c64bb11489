// SPDX-License-Identifier: MIT
// `shardscope-cli serve --stdio`: one client's requests on stdin, replies on stdout. Each
// request runs on a thread of its own, so that a tensor's statistics need not wait for a verify;
// their frames interleave.
#include "read/indexcache.h"
#include "read/mappedfile.h"
#include "remote/codec.h"
#include "remote/host.h"
#include "remote/launch.h"
#include "remote/listing.h"
#include "remote/wire.h"
#include "shardscope/escape.h"
#include "shardscope/tensor.h"
#include "shardscope/version.h"
#include "shardscope/writefile.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>

namespace shardscope {

namespace detail::remote {

namespace {

struct Opened
{
    std::string path;
    OpenedIndex index;
};

// SHARDSCOPE_TIMING: where a request's seconds go, on stderr (ssh carries it to the client).
class StepTimer
{
public:
    explicit StepTimer(std::string what)
        : m_what(std::move(what))
        , m_on(std::getenv("SHARDSCOPE_TIMING") != nullptr)
    {}
    void step(const char *name)
    {
        if (!m_on)
            return;
        const auto now = std::chrono::steady_clock::now();
        std::fprintf(stderr, "timing: %s: %s %.3f s\n", m_what.c_str(), name,
                     std::chrono::duration<double>(now - m_last).count());
        m_last = now;
    }

private:
    std::string m_what;
    bool m_on;
    std::chrono::steady_clock::time_point m_last = std::chrono::steady_clock::now();
};

// The requests the protocol names; nothing else runs.
const std::set<std::string> kOps = {"open",       "inspect", "diff",   "checkpoint_diff",
                                    "value_diff", "verify",  "report", "fix",
                                    "tensor",     "object",  "list"};

class Server
{
public:
    Server(int in, int out)
        : m_reader(in)
        , m_writer(out)
        , m_threads(std::min(usableCpus(), 8))
    {
        // Under a cgroup's memory limit (a login node's slice, a Slurm allocation) a quarter
        // of that, not of the machine; otherwise the front door's own default.
        if (auto limit = cgroupMemoryLimit(); limit && *limit < physicalMemory())
            m_memory = *limit / 4;
    }

    int run();

private:
    Status hello(const Frame &f);
    void start(uint32_t id, const json &control, std::string_view blob);
    void runRequest(uint32_t id, const std::string &op, const json &args,
                    const CancelToken &cancel);
    Result<json> handle(uint32_t id, const std::string &op, const json &args,
                        const JobControl &control);
    JobControl controlFor(uint32_t id, const CancelToken &cancel);
    Status sendIndex(uint32_t id, const Opened &opened, int64_t handle, const json &have,
                     const std::string &ahead = {});
    std::string sendEntryAhead(uint32_t id, const std::string &path, const json &have);
    Status sendEntry(uint32_t id, const json &message, std::string_view header,
                     std::string_view entry, const std::string &entryPath, StepTimer &timer);
    void sendError(uint32_t id, const Error &e);
    OpenedIndex opened(const json &handle) const;
    int64_t keep(Opened opened);

    FrameReader m_reader;
    FrameWriter m_writer;
    int m_threads = 1;
    int m_minor = 0;       ///< the protocol's minor version both sides speak
    uint64_t m_memory = 0; ///< 0: the front door's default
    mutable std::mutex m_mutex;
    std::condition_variable m_idle;
    std::map<uint32_t, CancelToken> m_jobs;
    std::map<int64_t, Opened> m_opened;
    int64_t m_nextHandle = 1;
    int m_running = 0;
};

Status Server::hello(const Frame &f)
{
    auto bad = [&](const std::string &message) {
        (void)m_writer.control(f.id, {{"type", "refused"}, {"message", message}});
        return makeError(Error::Code::Format, message);
    };
    if (f.kind != FrameKind::Control)
        return bad("the client did not say hello first");
    auto j = parseControl(f.payload);
    if (!j || (*j)["type"] != "hello")
        return bad("the client did not say hello first");
    const int major = j->value("major", -1);
    const std::string theirs = j->value("version", "?");
    if (major != kWireMajor)
        return bad("shardscope-cli " + std::string(kVersion) + " at " + selfExecutable() + " on " +
                   hostName() + " speaks protocol " + std::to_string(kWireMajor) +
                   ", the client (ShardScope " + theirs + ") protocol " + std::to_string(major) +
                   ": install the same ShardScope version on both");
    if (j->value("no_cache", false))
        ::setenv("SHARDSCOPE_NO_CACHE", "1", 1);
    const std::string srun = findOnPath("srun"), torchrun = findOnPath("torchrun");
    m_minor = std::min(kWireMinor, j->value("minor", 0));
    return m_writer.control(f.id, {{"type", "hello"},
                                   {"major", kWireMajor},
                                   {"minor", m_minor},
                                   {"version", kVersion},
                                   {"host", hostName()},
                                   {"executable", selfExecutable()},
                                   {"pid", int64_t(::getpid())},
                                   {"threads", m_threads},
                                   {"memory", m_memory ? m_memory : physicalMemory() / 4},
                                   {"srun", !srun.empty()},
                                   {"torchrun", !torchrun.empty()},
                                   {"capabilities", {"zstd", "launch"}}});
}

int Server::run()
{
    // The ready line: what the client looks for past a login shell's chatter.
    if (!m_writer.raw(std::string(kReadyPrefix) + std::to_string(kWireMajor) + " " + kVersion +
                      "\n"))
        return 2;
    {
        auto first = m_reader.next();
        if (!first)
            return 2;
        if (auto s = hello(*first); !s) {
            std::cerr << "shardscope-cli serve: " << s.error().message << "\n";
            return 2;
        }
    }
    struct Incoming
    {
        json control;
        std::unique_ptr<BlobReceiver> blob;
    };
    std::map<uint32_t, Incoming> incoming;
    for (;;) {
        auto f = m_reader.next();
        if (!f) {
            if (f.error().message != "closed")
                std::cerr << "shardscope-cli serve: " << f.error().message << "\n";
            break;
        }
        if (f->kind == FrameKind::Control) {
            auto j = parseControl(f->payload);
            if (!j) {
                std::cerr << "shardscope-cli serve: " << j.error().message << "\n";
                break;
            }
            const std::string type = (*j)["type"].get<std::string>();
            if (type == "request") {
                const json blob = j->value("blob", json());
                if (blob.is_object() && blob.contains("raw") && blob["raw"].is_number_unsigned())
                    incoming[f->id] = {std::move(*j),
                                       std::make_unique<BlobReceiver>(blob["raw"].get<uint64_t>())};
                else
                    start(f->id, *j, {});
            } else if (type == "cancel") {
                std::lock_guard lock(m_mutex);
                if (auto it = m_jobs.find(f->id); it != m_jobs.end())
                    it->second.cancel();
            } else if (type == "release") {
                std::lock_guard lock(m_mutex);
                m_opened.erase(j->value("handle", int64_t(0)));
            } else if (type == "bye") {
                break;
            } else {
                sendError(f->id, makeError(Error::Code::Unsupported,
                                           "a message of type '" + visibleText(type) +
                                               "' this server (" + kVersion + ") does not know"));
            }
            continue;
        }
        auto it = incoming.find(f->id);
        if (it == incoming.end()) {
            std::cerr << "shardscope-cli serve: a blob no request announced\n";
            break;
        }
        Status s = Ok{};
        if (f->kind == FrameKind::BlobChunk) {
            s = it->second.blob->chunk(f->payload);
        } else {
            auto bytes = it->second.blob->finish(f->payload);
            if (bytes)
                start(f->id, it->second.control, bytes->view());
            else
                s = bytes.error();
            if (bytes)
                incoming.erase(it);
        }
        if (!s) {
            sendError(f->id, s.error());
            incoming.erase(f->id);
        }
    }
    // The client is gone: stop what runs, let the index cache's writes finish, and leave.
    std::unique_lock lock(m_mutex);
    for (auto &[id, token] : m_jobs)
        token.cancel();
    const bool idle =
        m_idle.wait_for(lock, std::chrono::seconds(5), [this] { return m_running == 0; });
    lock.unlock();
    waitForIndexWrites();
    std::fflush(nullptr);
    if (!idle) // a job stuck in a read: its thread cannot be joined
        ::_exit(0);
    return 0;
}

void Server::start(uint32_t id, const json &control, std::string_view blob)
{
    const std::string op = control.value("op", "");
    if (!kOps.count(op)) {
        sendError(id,
                  makeError(Error::Code::Unsupported, "no request '" + visibleText(op) +
                                                          "' in this server (" + kVersion + ")"));
        return;
    }
    json args = json::object();
    if (!blob.empty()) {
        auto a = fromPack(blob);
        if (!a) {
            sendError(id, a.error());
            return;
        }
        args = std::move(*a);
    }
    CancelToken token;
    {
        std::lock_guard lock(m_mutex);
        m_jobs[id] = token;
        ++m_running;
    }
    std::thread([this, id, op, args = std::move(args), token] {
        runRequest(id, op, args, token);
        std::lock_guard lock(m_mutex);
        m_jobs.erase(id);
        --m_running;
        m_idle.notify_all();
    }).detach();
}

JobControl Server::controlFor(uint32_t id, const CancelToken &cancel)
{
    // Progress at most ten times a second, and every change of stage.
    struct Throttle
    {
        std::string stage;
        std::chrono::steady_clock::time_point last;
    };
    auto t = std::make_shared<Throttle>();
    JobControl c;
    c.cancel = cancel;
    c.progress = [this, id, t](const JobProgress &p) {
        const auto now = std::chrono::steady_clock::now();
        if (p.stage == t->stage && now - t->last < std::chrono::milliseconds(100) &&
            !(p.total && p.done == p.total))
            return true;
        t->stage = std::string(p.stage);
        t->last = now;
        (void)m_writer.control(
            id, {{"type", "progress"}, {"stage", t->stage}, {"done", p.done}, {"total", p.total}});
        return true;
    };
    return c;
}

void Server::sendError(uint32_t id, const Error &e)
{
    (void)m_writer.controlWithBlob(id, {{"type", "error"}}, toPack(errorToJson(e)));
}

OpenedIndex Server::opened(const json &handle) const
{
    if (!handle.is_number_integer())
        return nullptr;
    std::lock_guard lock(m_mutex);
    auto it = m_opened.find(handle.get<int64_t>());
    return it == m_opened.end() ? nullptr : it->second.index;
}

int64_t Server::keep(Opened o)
{
    std::lock_guard lock(m_mutex);
    const int64_t h = m_nextHandle++;
    m_opened[h] = std::move(o);
    return h;
}

Status Server::sendEntry(uint32_t id, const json &message, std::string_view header,
                         std::string_view entry, const std::string &entryPath, StepTimer &timer)
{
    using Part = FrameWriter::Part;
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t *>(entry.data()),
                                         entry.size());
    // The persistent index's entry: its compressed form kept beside it goes as it is (the
    // compression is most of a cached open's time), never one that is not this entry's.
    if (!entryPath.empty()) {
        auto kept = keptCompressedEntry(entryPath, bytes);
        if (kept) {
            const Part frame{{}, nullptr, kept->frame, entry.size()};
            const Status s = header.empty()
                                 ? m_writer.controlWithFrames(id, message, {frame})
                                 : m_writer.controlWithFrames(id, message, {Part{header}, frame});
            timer.step("sent its kept compressed form");
            return s;
        }
        if (std::getenv("SHARDSCOPE_TIMING"))
            std::fprintf(stderr, "timing: index: its compressed form not used: %s\n",
                         kept.error().toString().c_str());
    }
    std::string frame;
    const Part part{entry, entryPath.empty() ? nullptr : &frame};
    const Status s = header.empty() ? m_writer.controlWithFrames(id, message, {part})
                                    : m_writer.controlWithFrames(id, message, {Part{header}, part});
    if (s && !entryPath.empty())
        keepCompressedEntry(entryPath, bytes, std::move(frame));
    timer.step("compressed and sent");
    return s;
}

std::string Server::sendEntryAhead(uint32_t id, const std::string &path, const json &have)
{
    // A DCP directory whose persistent entry is the index (common.pt's keys and a Megatron
    // root's tracker are added or followed by the open).
    namespace fs = std::filesystem;
    std::error_code ec;
    if (m_minor < 1 || !fs::is_directory(path, ec))
        return {};
    fs::path dir = path;
    if (fs::exists(dir / "latest_checkpointed_iteration.txt", ec)) {
        // A Megatron root: the iteration its tracker names, as the open follows it (anything
        // else in it is the open's to say).
        auto text = readTextFile((dir / "latest_checkpointed_iteration.txt").string(), 64);
        if (!text)
            return {};
        std::string it = *text;
        std::erase_if(it, [](unsigned char c) { return std::isspace(c); });
        if (it == "release") {
            dir /= "release";
        } else if (!it.empty() && it.size() <= 12 &&
                   std::all_of(it.begin(), it.end(),
                               [](unsigned char c) { return std::isdigit(c); })) {
            char name[32];
            std::snprintf(name, sizeof name, "iter_%07llu", std::stoull(it));
            dir /= name;
        } else {
            return {};
        }
    }
    if (fs::exists(dir / "common.pt", ec)) // its keys are added by the open
        return {};
    StepTimer timer("entry");
    auto entry = currentIndexEntry(dir.string());
    if (!entry)
        return {};
    timer.step("found");
    const std::string_view bytes(reinterpret_cast<const char *>(entry->bytes.data()),
                                 entry->bytes.size());
    const std::string sum = entryIdentity(bytes);
    json message = {{"type", "entry"}, {"entry", sum}};
    if (have.is_array())
        for (const json &h : have)
            if (h.is_string() && entryPartOf(h.get<std::string>()) == sum) {
                message["held"] = h;
                return m_writer.control(id, message) ? sum : std::string();
            }
    return sendEntry(id, message, {}, bytes, entry->path, timer) ? sum : std::string();
}

Status Server::sendIndex(uint32_t id, const Opened &o, int64_t handle, const json &have,
                         const std::string &ahead)
{
    StepTimer timer("index");
    const IndexBlob blob = indexBlob(*o.index);
    timer.step("encoded");
    json message = {{"type", "index"}, {"handle", handle}, {"identity", blob.identity}};
    // The client keeps the indexes it received: one it holds travels as its header alone, as
    // does one whose entry went ahead of the open.
    if (have.is_array() && std::find(have.begin(), have.end(), blob.identity) != have.end()) {
        message["held"] = true;
        return m_writer.controlWithBlob(id, message, blob.header);
    }
    if (!ahead.empty() && entryPartOf(blob.identity) == ahead) {
        message["entry_sent"] = true;
        return m_writer.controlWithBlob(id, message, blob.header);
    }
    if (m_minor < 1) {
        Status s = m_writer.controlWithBlob(id, message, {blob.header, blob.entry});
        timer.step("compressed and sent");
        return s;
    }
    return sendEntry(id, message, blob.header, blob.entry, blob.entryPath, timer);
}

void Server::runRequest(uint32_t id, const std::string &op, const json &args,
                        const CancelToken &cancel)
{
    auto result = handle(id, op, args, controlFor(id, cancel));
    if (!result) {
        sendError(id, result.error());
        return;
    }
    (void)m_writer.controlWithBlob(id, {{"type", "result"}}, toPack(*result));
}

Result<json> Server::handle(uint32_t id, const std::string &op, const json &args,
                            const JobControl &control)
{
    const json none;
    auto arg = [&](const char *name) -> const json & {
        auto it = args.find(name);
        return it == args.end() ? none : *it;
    };
    auto handleArg = [&](size_t i) {
        const json &h = arg("opened");
        return h.is_array() && i < h.size() ? opened(h[i]) : nullptr;
    };
    // A layout sent along (read or built on the client).
    std::shared_ptr<const Layout> layout;
    if (!arg("layout").is_null()) {
        auto l = fromJson<Layout>(arg("layout"));
        if (!l)
            return l.error();
        layout = std::make_shared<const Layout>(std::move(*l));
    }
    auto missing = [&](const char *what) {
        return makeError(Error::Code::NotFound,
                         std::string(what) + " is not open on the server (released?)");
    };

    if (op == "open") {
        const std::string path = arg("path").is_string() ? arg("path").get<std::string>() : "";
        if (!control.report({"open", 0, 0}))
            return makeError(Error::Code::Cancelled, "cancelled");
        // The persistent index's entry for the metadata as it is now goes first (the client
        // shows its keys), then the index as the whole open found it (the data files checked).
        const std::string ahead = sendEntryAhead(id, path, arg("have"));
        if (!ahead.empty() && !control.report({"check", 0, 0}))
            return makeError(Error::Code::Cancelled, "cancelled");
        StepTimer timer("open");
        auto index = openCheckpoint(path);
        timer.step("opened");
        if (!index)
            return index.error();
        Opened o{path, std::make_shared<const CheckpointIndex>(std::move(*index))};
        const int64_t h = keep(o);
        if (auto s = sendIndex(id, o, h, arg("have"), ahead); !s)
            return s.error();
        return json{{"handle", h}};
    }
    if (op == "list") { // names, kinds and sizes only: a client's file browser
        auto listing = listDirectory(arg("path").is_string() ? arg("path").get<std::string>() : "",
                                     control.cancel);
        if (!listing)
            return listing.error();
        return listingToJson(*listing);
    }
    if (op == "tensor" || op == "object") {
        // By its place in the index both sides hold (no search among a million keys), and
        // its key, which must be the one there.
        const OpenedIndex index = opened(arg("handle"));
        if (!index)
            return missing("the checkpoint");
        const std::string key = arg("key").is_string() ? arg("key").get<std::string>() : "";
        const uint64_t item =
            arg("item").is_number_unsigned() ? arg("item").get<uint64_t>() : UINT64_MAX;
        if (item >= index->itemCount() || index->itemKey(item) != key)
            return makeError(Error::Code::NotFound, "no such item in the open index").atKey(key);
        if (op == "object") {
            if (item < index->tensors.size())
                return makeError(Error::Code::NotFound, "a tensor, not an object").atKey(key);
            const ObjectEntry &o = index->objects[item - index->tensors.size()];
            if (o.value)
                return toJson(*o.value);
            auto v = readObject(*index, o);
            if (!v)
                return v.error();
            return toJson(*v);
        }
        if (item >= index->tensors.size())
            return makeError(Error::Code::NotFound, "an object, not a tensor").atKey(key);
        const TensorEntry *t = &index->tensors[item];
        if (!control.report({"read", 0, t->nbytes()}))
            return makeError(Error::Code::Cancelled, "cancelled");
        auto data = readTensor(*index, *t);
        if (!data)
            return data.error();
        RemoteTensorDetails d;
        d.bytes = data->bytes.size();
        if (auto h = tensorHealth(*data))
            d.health = std::move(*h);
        else
            d.healthError = h.error().message;
        d.sha256 = sha256Hex(*data);
        return toJson(d);
    }

    // The front door's jobs: the request, and what it points at.
    auto decode = [&]<typename T>(T &out) -> Status {
        auto r = fromJson<T>(arg("request"));
        if (!r)
            return r.error();
        out = std::move(*r);
        return Ok{};
    };
    if (op == "inspect") {
        InspectRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        r.opened = handleArg(0);
        const bool known = r.opened != nullptr;
        auto result = runInspect(r, control);
        if (!result)
            return result.error();
        json j = inspectToJson(*result);
        if (!known) { // the index it ran on travels first, and stays open here
            Opened o{r.path, result->index};
            const int64_t h = keep(o);
            if (auto s = sendIndex(id, o, h, arg("have")); !s)
                return s.error();
            j["handle"] = h;
        }
        return j;
    }
    if (op == "diff") {
        DiffRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        r.opened = handleArg(0);
        r.openedLayout = layout;
        auto result = runDiff(r, control);
        if (!result)
            return result.error();
        return toJson(*result);
    }
    if (op == "checkpoint_diff") {
        CheckpointDiffRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        r.firstOpened = handleArg(0);
        r.secondOpened = handleArg(1);
        auto result = runCheckpointDiff(r, control);
        if (!result)
            return result.error();
        return toJson(*result);
    }
    if (op == "value_diff") {
        ValueDiffRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        r.firstOpened = handleArg(0);
        r.secondOpened = handleArg(1);
        r.openedLayout = layout;
        if (!r.threads)
            r.threads = m_threads;
        if (!r.maxMemory)
            r.maxMemory = m_memory;
        auto result = runValueDiff(r, control);
        if (!result)
            return result.error();
        return toJson(*result);
    }
    if (op == "verify") {
        VerifyRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        r.opened = handleArg(0);
        r.openedLayout = layout;
        if (!r.maxMemory)
            r.maxMemory = m_memory;
        auto launch =
            fromJson<RemoteLaunch>(arg("launch").is_null() ? json::object() : arg("launch"));
        if (!launch)
            return launch.error();
        if (launch->launcher != RemoteLaunch::Launcher::None) {
            auto result = runLaunchedVerify(r, layout.get(), *launch, control);
            if (!result)
                return result.error();
            return toJson(*result);
        }
        if (!r.threads)
            r.threads = m_threads;
        auto result = runVerify(r, control);
        if (!result)
            return result.error();
        return toJson(*result);
    }
    if (op == "report") {
        ReportRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        if (r.diff) {
            r.diff->opened = handleArg(0);
            r.diff->openedLayout = layout;
        }
        if (r.against) {
            r.against->firstOpened = handleArg(0);
            r.against->secondOpened = handleArg(1);
        }
        if (r.values) {
            r.values->firstOpened = handleArg(0);
            r.values->secondOpened = handleArg(1);
            r.values->openedLayout = layout;
            if (!r.values->threads)
                r.values->threads = m_threads;
        }
        auto result = runReport(r, control);
        if (!result)
            return result.error();
        return toJson(*result);
    }
    if (op == "fix") {
        FixRequest r;
        if (auto s = decode(r); !s)
            return s.error();
        r.opened = handleArg(0);
        r.openedLayout = layout;
        // A layout that travelled is a file of the client's, which this host lacks: it is
        // written beside OUT, and the manifest and its commands name it there, so that they
        // run here as a local repair's do.
        const bool beside = layout && !r.output.empty();
        if (beside)
            r.layout = layoutBesideOutput(r.output);
        auto result = runFix(r, control);
        if (!result)
            return result.error();
        if (beside && result->written)
            if (auto error = writeFileAtomically(r.layout, layoutToJson(*layout)))
                return makeError(error->code, "the repaired checkpoint was written, but not "
                                              "its layout beside it: " +
                                                  error->message)
                    .inFile(r.layout);
        return toJson(*result);
    }
    return makeError(Error::Code::Unsupported, "no request '" + visibleText(op) + "'");
}

} // namespace

} // namespace detail::remote

int serveStdio()
{
    using namespace detail::remote;
    // The wire moves to descriptors of its own before anything can print: whatever writes to
    // stdout later (a library, a launched job) goes to stderr, which ssh carries apart.
    const int in = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
    const int out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (in < 0 || out < 0) {
        std::cerr << "shardscope-cli serve: no stdin or stdout to serve on\n";
        return 2;
    }
    ::dup2(2, 1);
    if (const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC); null >= 0)
        ::dup2(null, 0);
    std::signal(SIGPIPE, SIG_IGN);
    Server server(in, out);
    return server.run();
}

} // namespace shardscope
