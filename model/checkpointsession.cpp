// SPDX-License-Identifier: MIT
#include "checkpointsession.h"

#include "backendrunner.h"
#include "checkpointbackend.h"
#include "keptlayout.h"
#include "layerfamily.h"
#include "reloadsummary.h"
#include "remotebackend.h"
#include "repairsummary.h"

#include <shardscope/writefile.h>

#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QMutexLocker>

#include <sys/stat.h>

#include <atomic>
#include <cstdio>

namespace shardscope::model {

namespace {

using Lane = BackendRunner::Lane;

std::string native(const QString &path)
{
    return QFile::encodeName(path).toStdString();
}

QString fileName(const QString &path)
{
    QString p = path;
    while (p.size() > 1 && p.endsWith(QLatin1Char('/')))
        p.chop(1);
    return QFileInfo(p).fileName();
}

Error cancelledError()
{
    return makeError(Error::Code::Cancelled, "cancelled");
}

std::atomic<size_t> s_topRowsFirstFrom{100'000};

constexpr const char *kValuesInTwoPlaces =
    "a report's values are compared element by element where both checkpoints are; these are "
    "in two places (Compare Values compares them by each tensor's SHA-256)";

bool timing()
{
    static const bool on = qEnvironmentVariableIsSet("SHARDSCOPE_TIMING");
    return on;
}

} // namespace

struct CheckpointSession::Opened
{
    IndexSnapshot index;
    std::shared_ptr<CheckpointTreeModel::Prepared> tree; ///< null when keysShown's completes
    IndexSnapshot keysShown; ///< the early index `index` completes, or null
};

// What the watched paths hold, as far as a reader of the checkpoint cares: each file's size,
// modification time and inode (a save renames a new file over the old), a directory's
// modification time (files added, removed or renamed). Never the change time: a hard link
// (a repair's output) or chmod changes it and nothing a load reads.
struct CheckpointSession::DiskState
{
    struct Entry
    {
        QString path;
        bool exists = false;
        qint64 size = 0, mtimeSec = 0, mtimeNsec = 0;
        quint64 inode = 0;
        bool operator==(const Entry &) const = default;
    };
    std::vector<Entry> entries;
    bool operator==(const DiskState &) const = default;

    static DiskState of(const QStringList &paths)
    {
        DiskState s;
        for (const QString &p : paths) {
            Entry e;
            e.path = p;
            struct stat st = {};
            if (::stat(QFile::encodeName(p).constData(), &st) == 0) {
                e.exists = true;
                e.size = S_ISDIR(st.st_mode) ? 0 : qint64(st.st_size);
                e.mtimeSec = qint64(st.st_mtim.tv_sec);
                e.mtimeNsec = qint64(st.st_mtim.tv_nsec);
                e.inode = quint64(st.st_ino);
            }
            s.entries.push_back(e);
        }
        return s;
    }
};

CheckpointSession::CheckpointSession(QObject *parent)
    : CheckpointSession(localBackend(), parent)
{}

CheckpointSession::CheckpointSession(std::shared_ptr<CheckpointBackend> backend, QObject *parent)
    : QObject(parent)
    , m_backend(std::move(backend))
    , m_runner(new BackendRunner(this))
    , m_watcher(new QFileSystemWatcher(this))
{
    registerMetaTypes();
    connect(m_watcher, &QFileSystemWatcher::fileChanged, this, &CheckpointSession::onWatched);
    connect(m_watcher, &QFileSystemWatcher::directoryChanged, this, &CheckpointSession::onWatched);
    connect(m_runner, &BackendRunner::jobStarted, this, [this](const JobInfo &job) {
        if (job.shown())
            Q_EMIT jobStarted(job);
    });
    connect(m_runner, &BackendRunner::jobProgress, this,
            [this](const JobInfo &job, const QString &stage, int permille, double eta) {
                if (job.shown())
                    Q_EMIT jobProgress(job, stage, permille, eta);
            });
    connect(
        m_runner, &BackendRunner::jobEnded, this,
        [this](const JobInfo &job, bool ok, const QString &message) {
            if (!job.shown())
                return;
            Q_EMIT jobEnded(job, ok, message);
            if (ok)
                return;
            // An open that failed (or was cancelled) leaves what was shown as it was.
            if (job.kind == JobKind::Open && !m_openingPath.isEmpty() &&
                !m_runner->hasJob([](const JobInfo &j) { return j.kind == JobKind::Open; })) {
                m_beforeReload.reset();
                Q_EMIT openFailed(std::exchange(m_openingPath, {}), message);
            }
            if (job.kind == JobKind::OpenCompare && !m_compareOpeningPath.isEmpty() &&
                !m_runner->hasJob([](const JobInfo &j) { return j.kind == JobKind::OpenCompare; }))
                Q_EMIT compareOpenFailed(std::exchange(m_compareOpeningPath, {}), message);
        });
}

CheckpointSession::~CheckpointSession()
{
    // The lanes first: a running job's work may use the layout cache.
    delete m_runner;
}

QString CheckpointSession::location() const
{
    return m_backend->location();
}

bool CheckpointSession::connected() const
{
    return m_backend->connected();
}

void CheckpointSession::reconnect()
{
    supersede(JobKind::Open);
    auto backend = m_backend;
    m_runner->start<bool>(
        {JobKind::Open, tr("Reconnect to %1").arg(location()), Lane::Quick, {}},
        [backend](const JobControl &control) -> Result<bool> {
            control.report({"connect", 0, 0});
            if (auto s = backend->reconnect(); !s)
                return s.error();
            return true;
        },
        [this](bool) {
            Q_EMIT reconnected();
            reload(); // what is shown stays until the checkpoint is open again
        });
}

bool CheckpointSession::isJobRunning() const
{
    return m_runner->hasJob([](const JobInfo &j) { return j.shown(); });
}

std::vector<JobInfo> CheckpointSession::jobs() const
{
    std::vector<JobInfo> shown;
    for (const JobInfo &j : m_runner->jobs())
        if (j.shown())
            shown.push_back(j);
    return shown;
}

std::shared_ptr<const LoadMarkSet> CheckpointSession::loadMarks() const
{
    if (!m_diff)
        return nullptr;
    for (const auto &marks : {m_verifyMarks, m_diffMarks})
        if (marks && marks->diff == m_diff && marks->verification == m_verification)
            return marks;
    return model::loadMarks(m_diff, m_verification, m_index);
}

std::shared_ptr<CheckpointTreeModel::Prepared>
CheckpointSession::takePreparedTree(const IndexSnapshot &index)
{
    if (!index || m_preparedTree.first != index)
        return nullptr;
    m_preparedTree.first.reset();
    return std::exchange(m_preparedTree.second, nullptr);
}

IndexSnapshot CheckpointSession::keysCompletedBy(const IndexSnapshot &index) const
{
    return index && m_completedKeys.second == index ? m_completedKeys.first : nullptr;
}

void CheckpointSession::clearResults(bool diffToo)
{
    if (diffToo && m_diff) {
        m_diff.reset();
        m_loadProblems.reset();
        Q_EMIT diffChanged(nullptr);
    }
    if (m_verification) {
        m_verification.reset();
        Q_EMIT verificationChanged(nullptr);
    }
}

void CheckpointSession::clearComparison()
{
    if (m_comparison) {
        m_comparison.reset();
        Q_EMIT comparisonChanged(nullptr);
    }
    if (m_values) {
        m_values.reset();
        Q_EMIT valuesChanged(nullptr);
    }
}

// The newest job of a kind wins; the one it replaces ends, cancelled. Other kinds run on.
void CheckpointSession::supersede(JobKind kind)
{
    m_runner->cancelIf([kind](const JobInfo &j) { return j.kind == kind; });
}

void CheckpointSession::cancelKind(JobKind kind)
{
    supersede(kind);
}

void CheckpointSession::cancel()
{
    m_runner->cancelIf([](const JobInfo &j) { return j.shown(); });
}

// ---------------------------------------------------------------- opening

void CheckpointSession::setTopRowsFirstFrom(size_t entries)
{
    s_topRowsFirstFrom = entries;
}

void CheckpointSession::open(const QString &path)
{
    supersede(JobKind::Open);
    m_openingPath = path;
    Q_EMIT opening(path);
    BackendRunner *runner = m_runner;
    auto backend = m_backend;
    m_runner->start<Opened>(
        {JobKind::Open, tr("Open %1").arg(fileName(path)), Lane::Quick, {}},
        [this, runner, backend, file = native(path)](const JobControl &control) -> Result<Opened> {
            QElapsedTimer timer;
            timer.start();
            // A .metadata lists its keys in its first quarter (of bytes; ~60% of the open at
            // DeepSeek-V3 scale): the tree is shown then, and filled in (problems, stored
            // sizes) when the rest is read.
            IndexSnapshot keysShown;
            qint64 keysMs = -1, keysTreeMs = 0;
            OpenOptions options;
            options.onKeysKnown = [&](const CheckpointIndex &keys) {
                if (control.cancel.cancelled())
                    return;
                keysMs = timer.elapsed();
                auto tree = CheckpointTreeModel::prepareKeys(keys);
                keysTreeMs = timer.elapsed() - keysMs;
                keysShown = CheckpointTreeModel::indexOf(*tree);
                runner->deliverWhileRunning(control.cancel, [this, tree, shown = keysShown] {
                    m_preparedTree = {shown, tree};
                    Q_EMIT keysKnown(shown);
                });
            };
            control.report({"open", 0, 0});
            Result<IndexSnapshot> index = backend->openShared(file, options, control);
            if (!index)
                return index.error();
            if (control.cancel.cancelled())
                return cancelledError();
            const qint64 openMs = timer.elapsed();
            Opened out;
            out.index = std::move(*index);
            // The tree shown early stands when the finished index has the same entries; else
            // the tree the views show is built here (seconds at DeepSeek-V3 scale).
            qint64 topMs = -1;
            if (keysShown && CheckpointTreeModel::sameEntries(*keysShown, *out.index)) {
                out.keysShown = keysShown;
            } else {
                // A big checkpoint read whole at once (the persistent index): its top-level
                // rows, a pass over the keys, are painted while the rest of the tree is built.
                if (!keysShown && out.index->tensors.size() + out.index->objects.size() >=
                                      s_topRowsFirstFrom.load()) {
                    auto top = CheckpointTreeModel::prepareTop(out.index);
                    topMs = timer.elapsed() - openMs;
                    runner->deliverWhileRunning(control.cancel, [this, top, shown = out.index] {
                        m_preparedTree = {shown, top};
                        Q_EMIT keysKnown(shown);
                    });
                }
                control.report({"tree", 0, 0});
                out.tree = CheckpointTreeModel::prepare(out.index);
            }
            if (timing()) {
                if (keysMs >= 0)
                    std::fprintf(stderr, "open: keys at %lld ms (their tree %lld ms)\n",
                                 static_cast<long long>(keysMs),
                                 static_cast<long long>(keysTreeMs));
                if (topMs >= 0)
                    std::fprintf(stderr, "open: top rows %lld ms\n", static_cast<long long>(topMs));
                std::fprintf(stderr, "open: index %lld ms, tree %lld ms\n",
                             static_cast<long long>(openMs),
                             static_cast<long long>(timer.elapsed() - openMs));
            }
            return out;
        },
        [this, path](Opened result) { adoptOpened(path, result); });
}

void CheckpointSession::adoptOpened(const QString &path, const Opened &result)
{
    m_openingPath.clear();
    // What ran for the previous checkpoint is stale now (a layout being generated is not).
    m_runner->cancelIf([](const JobInfo &j) {
        return j.kind != JobKind::Layout && j.kind != JobKind::OpenCompare;
    });
    const IndexSnapshot before = std::exchange(m_beforeReload, {});
    m_path = path;
    m_index = result.index;
    if (result.tree)
        m_preparedTree = {result.index, result.tree};
    m_completedKeys = result.keysShown ? std::pair{result.keysShown, result.index}
                                       : std::pair<IndexSnapshot, IndexSnapshot>{};
    m_diffMarks.reset();
    m_verifyMarks.reset();
    clearResults(true);
    clearComparison();
    watch(path);
    Q_EMIT opened(m_index);
    if (before && m_index) {
        const IndexSnapshot after = m_index;
        m_runner->start<QString>(
            {JobKind::Reload, tr("Compare with the checkpoint before reloading"), Lane::Long, {}},
            [before, after](const JobControl &control) -> Result<QString> {
                QString summary =
                    describeReload(*before, *after, [&](uint64_t done, uint64_t total) {
                        return control.report({"compare", done, total});
                    });
                if (control.cancel.cancelled())
                    return cancelledError();
                return summary;
            },
            [this](QString summary) { Q_EMIT reloaded(summary); });
    }
}

void CheckpointSession::reload()
{
    if (m_path.isEmpty())
        return;
    IndexSnapshot before = m_index;
    open(m_path);
    m_beforeReload = std::move(before);
}

void CheckpointSession::setRemoteConnector(RemoteConnector connector)
{
    m_connector = std::move(connector);
}

bool CheckpointSession::compareAcross() const
{
    return m_compareBackend && m_compareBackend != m_backend;
}

void CheckpointSession::openCompare(const QString &path)
{
    auto located = RemoteLocation::parse(native(path));
    if (!located) {
        openCompareAt(path, path, m_backend, std::nullopt);
        return;
    }
    if (!*located) {
        Q_EMIT compareOpenFailed(path, QString::fromStdString(located->error().toString()));
        return;
    }
    const QString file = QFile::decodeName((*located)->path.c_str());
    // This session's host: its own connection, as a plain path there.
    if (!location().isEmpty() && QString::fromStdString((*located)->target.name()) == location())
        openCompareAt(file, file, m_backend, std::nullopt);
    else
        openCompareAt(path, file, nullptr, (*located)->target);
}

void CheckpointSession::openCompareHere(const QString &path)
{
    openCompareAt(path, path, location().isEmpty() ? m_backend : localBackend(), std::nullopt);
}

void CheckpointSession::openCompareAt(const QString &path, const QString &file,
                                      std::shared_ptr<CheckpointBackend> backend,
                                      std::optional<RemoteTarget> target)
{
    supersede(JobKind::OpenCompare);
    m_compareOpeningPath = path;
    RemoteConnector connect = m_connector;
    if (target && !connect) // the system's ssh, its prompts on its terminal
        connect = [](const RemoteTarget &t) -> Result<std::shared_ptr<CheckpointBackend>> {
            auto connected = RemoteBackend::connect(t, {});
            if (!connected)
                return connected.error();
            return std::shared_ptr<CheckpointBackend>(*connected);
        };
    // The server this session's host runs (tests: a build's CLI), whichever connects.
    if (target)
        if (auto *remote = dynamic_cast<RemoteBackend *>(m_backend.get()))
            if (const std::string &server = remote->session()->target().server; !server.empty())
                target->server = server;
    using Opened = std::pair<std::shared_ptr<CheckpointBackend>, IndexSnapshot>;
    m_runner->start<Opened>(
        {JobKind::OpenCompare, tr("Open %1 to compare").arg(fileName(file)), Lane::Quick, {}},
        [backend, target, connect,
         file = native(file)](const JobControl &control) -> Result<Opened> {
            std::shared_ptr<CheckpointBackend> at = backend;
            if (!at) {
                control.report({"connect", 0, 0});
                auto connected = connect(*target);
                if (!connected)
                    return connected.error();
                at = std::move(*connected);
            }
            control.report({"open", 0, 0});
            auto index = at->openShared(file, {}, control);
            if (!index)
                return index.error();
            return Opened(std::move(at), std::move(*index));
        },
        [this, file](Opened opened) {
            m_compareOpeningPath.clear();
            supersede(JobKind::Compare);
            supersede(JobKind::Values);
            m_comparePath = file;
            m_compareBackend = std::move(opened.first);
            m_compareLocation = m_compareBackend->location();
            m_compareIndex = std::move(opened.second);
            clearComparison();
            Q_EMIT compareOpened(m_compareIndex);
        });
}

void CheckpointSession::watch(const QString &path)
{
    if (!location().isEmpty()) // on another host: nothing here to watch
        return;
    if (!m_watcher->files().isEmpty() || !m_watcher->directories().isEmpty())
        m_watcher->removePaths(m_watcher->files() + m_watcher->directories());
    const QFileInfo info(path);
    QStringList paths{info.absoluteFilePath()};
    if (info.isDir()) // the files a save rewrites last
        for (const char *name :
             {".metadata", "latest_checkpointed_iteration.txt", "model.safetensors.index.json"})
            if (QFileInfo::exists(info.absoluteFilePath() + QLatin1Char('/') + QLatin1String(name)))
                paths << info.absoluteFilePath() + QLatin1Char('/') + QLatin1String(name);
    m_watcher->addPaths(paths);
    m_disk = std::make_unique<DiskState>(DiskState::of(paths));
}

// A watched path was touched: said once, when what a reader sees of it changed.
void CheckpointSession::onWatched()
{
    if (!m_disk)
        return;
    QStringList paths;
    for (const DiskState::Entry &e : m_disk->entries)
        paths << e.path;
    if (DiskState::of(paths) == *m_disk) {
        // Only its link count, permissions or access time: watch on (a path a watcher lost,
        // by a rename over it, is watched again).
        const QStringList watched = m_watcher->files() + m_watcher->directories();
        for (const QString &p : paths)
            if (!watched.contains(p))
                m_watcher->addPath(p);
        return;
    }
    m_disk.reset();
    m_watcher->removePaths(m_watcher->files() + m_watcher->directories());
    Q_EMIT changedOnDisk();
}

// ---------------------------------------------------------------- the layout

void CheckpointSession::setLayout(const QString &path)
{
    supersede(JobKind::Layout);
    m_configPath.clear();
    m_layoutOptions = {};
    applyLayout(path);
}

void CheckpointSession::applyLayout(const QString &path)
{
    m_layoutPath = path;
    m_diffMarks.reset();
    m_verifyMarks.reset();
    clearResults(true);
    Q_EMIT layoutChanged(path);
}

bool CheckpointSession::layoutIsGenerated() const
{
    return !m_layoutPath.isEmpty() && m_layoutDir.isValid() &&
           QFileInfo(m_layoutPath).absolutePath() ==
               QFileInfo(m_layoutDir.path()).absoluteFilePath();
}

QString CheckpointSession::layoutName() const
{
    if (m_layoutPath.isEmpty())
        return {};
    if (!m_configPath.isEmpty())
        return tr("the layout of %1").arg(fileName(m_configPath));
    return fileName(m_layoutPath);
}

QString CheckpointSession::keptLayoutPath(const QString &output) const
{
    if (!layoutIsGenerated())
        return m_layoutPath;
    return QFile::decodeName(layoutBesideOutput(native(output)).c_str());
}

QString CheckpointSession::repairLayoutPath(const QString &output) const
{
    if (location().isEmpty() || m_layoutPath.isEmpty())
        return keptLayoutPath(output);
    return QFile::decodeName(layoutBesideOutput(native(output)).c_str());
}

void CheckpointSession::setConfig(const QString &configPath, const LayoutOptions &options)
{
    supersede(JobKind::Layout);
    const QString out =
        m_layoutDir.isValid()
            ? m_layoutDir.filePath(QStringLiteral("layout-%1.json").arg(++m_layoutSerial))
            : QString();
    auto backend = m_backend;
    m_runner->start<QString>(
        {JobKind::Layout, tr("Layout from %1").arg(fileName(configPath)), Lane::Long, {}},
        [backend, config = native(configPath), options,
         out](const JobControl &control) -> Result<QString> {
            if (out.isEmpty())
                return makeError(Error::Code::Io, "no temporary folder for the generated layout");
            control.report({"layout", 0, 0});
            auto layout = backend->layoutFromConfig(config, options);
            if (!layout)
                return layout.error();
            if (auto error = writeFileAtomically(native(out), layoutToJson(*layout)))
                return *error;
            return out;
        },
        [this, configPath, options](QString written) {
            m_configPath = configPath;
            m_layoutOptions = options;
            applyLayout(written);
        });
}

Result<std::shared_ptr<const Layout>> CheckpointSession::cachedLayout(const std::string &path)
{
    // Keyed by path, modification time and size: an edited file is read again.
    const QFileInfo info(QFile::decodeName(path.c_str()));
    const std::string key = path + '@' + std::to_string(info.lastModified().toMSecsSinceEpoch()) +
                            '@' + std::to_string(info.size());
    {
        QMutexLocker lock(&m_layoutMutex);
        if (m_layoutCache.first == key)
            return m_layoutCache.second;
    }
    auto layout = m_backend->readLayout(path);
    if (!layout)
        return layout.error();
    auto shared = std::make_shared<const Layout>(std::move(*layout));
    QMutexLocker lock(&m_layoutMutex);
    m_layoutCache = {key, shared};
    return std::shared_ptr<const Layout>(shared);
}

// ---------------------------------------------------------------- the jobs

void CheckpointSession::runDiff(const DiffOptions &options)
{
    DiffRequest request;
    request.checkpoint = native(m_path);
    request.layout = native(m_layoutPath);
    request.options = options;
    request.opened = m_index;
    supersede(JobKind::Diff);
    clearResults(false); // a verification of other rules no longer says what this load does
    auto backend = m_backend;
    // The diff is shown as soon as it and its marks are known; folding its problems for the
    // Problems list (tens of thousands with a rule off at DeepSeek-V3 scale: half a second)
    // follows in the same job, which ends once they are folded.
    m_runner->start<std::pair<DiffSnapshot, FoldedProblemsSnapshot>>(
        {JobKind::Diff, tr("Diff against %1").arg(layoutName()), Lane::Long, {}},
        [this, backend, request](
            const JobControl &control) -> Result<std::pair<DiffSnapshot, FoldedProblemsSnapshot>> {
            QElapsedTimer timer;
            timer.start();
            DiffRequest r = request;
            control.report({"layout", 0, 0});
            auto layout = cachedLayout(r.layout);
            if (!layout)
                return layout.error();
            r.openedLayout = *layout;
            auto result = backend->diff(r, control);
            if (timing())
                std::fprintf(stderr, "diff job: %lld ms\n",
                             static_cast<long long>(timer.elapsed()));
            if (!result)
                return result.error();
            DiffSnapshot diff = freedOffThread(std::move(*result));
            // The tree's marks, here rather than on the GUI thread.
            if (control.cancel.cancelled())
                return cancelledError();
            auto marks = model::loadMarks(diff, nullptr, r.opened);
            if (timing())
                std::fprintf(stderr, "diff job with marks: %lld ms\n",
                             static_cast<long long>(timer.elapsed()));
            m_runner->deliverWhileRunning(control.cancel, [this, diff, marks] {
                m_diffMarks = marks;
                m_diff = diff;
                m_loadProblems.reset();
                Q_EMIT diffChanged(m_diff);
            });
            if (!control.report({"problems", 0, 0}))
                return cancelledError();
            auto folded = foldLoadProblems(*diff);
            if (control.cancel.cancelled())
                return cancelledError();
            return std::pair{diff, folded};
        },
        [this](std::pair<DiffSnapshot, FoldedProblemsSnapshot> done) {
            if (done.first != m_diff)
                return;
            m_loadProblems = std::move(done.second);
            Q_EMIT loadProblemsChanged(m_loadProblems);
        });
}

void CheckpointSession::runVerify(VerifyRequest request)
{
    request.checkpoint = native(m_path);
    request.layout = native(m_layoutPath);
    request.opened = m_index;
    request.comm = nullptr; // one process plays every rank
    supersede(JobKind::Verify);
    struct Done
    {
        VerifySnapshot report;
        std::shared_ptr<const LoadMarkSet> marks;
    };
    auto backend = m_backend;
    m_runner->start<Done>(
        {JobKind::Verify, tr("Verify against %1").arg(layoutName()), Lane::Long, {}},
        [backend, request, diff = m_diff](const JobControl &control) -> Result<Done> {
            auto report = backend->verify(request, control);
            if (!report)
                return report.error();
            if (report->result.cancelled)
                return cancelledError();
            Done done;
            done.report = std::make_shared<const VerifyReport>(std::move(*report));
            if (diff)
                done.marks = model::loadMarks(diff, done.report, request.opened);
            return done;
        },
        [this](Done done) {
            if (done.marks && done.marks->diff == m_diff)
                m_verifyMarks = std::move(done.marks);
            m_verification = std::move(done.report);
            Q_EMIT verificationChanged(m_verification);
        });
}

void CheckpointSession::runCompare(const DiffOptions &options)
{
    CheckpointDiffRequest request;
    request.first = native(m_path);
    request.second = native(m_comparePath);
    request.firstOpened = m_index;
    request.secondOpened = m_compareIndex;
    request.options = options;
    supersede(JobKind::Compare);
    // Two places: both indexes are here, and so is their structural comparison.
    auto backend = compareAcross() ? localBackend() : m_backend;
    m_runner->start<CompareSnapshot>(
        {JobKind::Compare, tr("Compare with %1").arg(fileName(m_comparePath)), Lane::Long, {}},
        [backend, request](const JobControl &control) -> Result<CompareSnapshot> {
            if (!request.firstOpened || !request.secondOpened)
                return makeError(Error::Code::NotFound, "open two checkpoints to compare");
            auto diff = backend->compare(request, control);
            if (!diff)
                return diff.error();
            return CompareSnapshot(std::make_shared<const CheckpointDiff>(std::move(*diff)));
        },
        [this](CompareSnapshot diff) {
            m_comparison = std::move(diff);
            Q_EMIT comparisonChanged(m_comparison);
        });
}

void CheckpointSession::runValues(ValueDiffRequest request)
{
    request.first = native(m_path);
    request.second = native(m_comparePath);
    if (request.layout.empty() && !m_layoutPath.isEmpty())
        request.layout = native(m_layoutPath);
    request.firstOpened = m_index;
    request.secondOpened = m_compareIndex;
    request.comm = nullptr;
    supersede(JobKind::Values);
    auto backend = m_backend;
    // Two places: each side's tensors hashed where they live (valuesByHash()).
    auto other = compareAcross() ? m_compareBackend : nullptr;
    m_runner->start<ValuesSnapshot>(
        {JobKind::Values,
         tr("Compare values with %1").arg(fileName(m_comparePath)),
         Lane::Long,
         {}},
        [backend, other, request](const JobControl &control) -> Result<ValuesSnapshot> {
            if (!request.firstOpened || !request.secondOpened)
                return makeError(Error::Code::NotFound, "open two checkpoints to compare");
            if (other) {
                InspectRequest a, b;
                a.path = request.first;
                b.path = request.second;
                a.hash = b.hash = true;
                a.opened = request.firstOpened;
                b.opened = request.secondOpened;
                auto first = backend->inspect(a, control);
                if (!first)
                    return first.error();
                auto second = other->inspect(b, control);
                if (!second)
                    return second.error();
                if (control.cancel.cancelled())
                    return cancelledError();
                return ValuesSnapshot(
                    std::make_shared<const ValueDiffResult>(valuesByHash(*first, *second)));
            }
            auto values = backend->values(request, control);
            if (!values)
                return values.error();
            if (values->cancelled)
                return cancelledError();
            return ValuesSnapshot(std::make_shared<const ValueDiffResult>(std::move(*values)));
        },
        [this](ValuesSnapshot values) {
            m_values = std::move(values);
            Q_EMIT valuesChanged(m_values);
        });
}

void CheckpointSession::exportReport(ReportRequest request, const QString &path)
{
    if (request.diff)
        request.diff->opened = m_index;
    if (request.against) {
        request.against->firstOpened = m_index;
        request.against->secondOpened = m_compareIndex;
    }
    if (request.values) {
        request.values->firstOpened = m_index;
        request.values->secondOpened = m_compareIndex;
    }
    const QString generated = layoutIsGenerated() ? m_layoutPath : QString();
    const QString kept = keptLayoutPath(path);
    supersede(JobKind::Export);
    // Against a checkpoint in another place: compared here, over both indexes.
    const bool across = request.against && compareAcross();
    auto backend = across ? localBackend() : m_backend;
    if (across && request.values) {
        m_runner->start<QString>(
            {JobKind::Export, tr("Export %1").arg(fileName(path)), Lane::Long, {}},
            [](const JobControl &) -> Result<QString> {
                return makeError(Error::Code::Unsupported, kValuesInTwoPlaces);
            },
            [](QString) {});
        return;
    }
    m_runner->start<QString>(
        {JobKind::Export, tr("Export %1").arg(fileName(path)), Lane::Long, {}},
        [backend, request, path, generated, kept](const JobControl &control) -> Result<QString> {
            // The report's reproduce command names the layout beside it.
            KeptLayout beside;
            if (!generated.isEmpty() && (request.diff || request.values))
                if (auto error = beside.copy(generated, kept))
                    return *error;
            auto report = backend->report(request, control);
            if (!report)
                return report.error();
            // The previous report stays whole until the new one is complete.
            if (auto error = writeFileAtomically(native(path), report->text))
                return *error;
            beside.keep();
            return path;
        },
        [this](QString written) { Q_EMIT exported(written); });
}

void CheckpointSession::saveRepaired(FixRequest request)
{
    request.opened = m_index;
    if (request.checkpoint.empty())
        request.checkpoint = native(m_path);
    const QString output = QFile::decodeName(request.output.c_str());
    // On another host the output is there and the layout here: it travels with the request
    // and the server writes it beside the output (repairLayoutPath()), which the manifest
    // names (a generated one is not copied beside an output this machine cannot write to).
    const bool remote = !location().isEmpty();
    const QString generated = layoutIsGenerated() && !remote ? m_layoutPath : QString();
    if (remote)
        request.layout = native(m_layoutPath);
    else if (request.layout.empty())
        request.layout = native(keptLayoutPath(output));
    supersede(JobKind::Repair);
    auto backend = m_backend;
    m_runner->start<QString>(
        {JobKind::Repair, tr("Repair into %1").arg(fileName(output)), Lane::Long, {}},
        [backend, request, generated](const JobControl &control) -> Result<QString> {
            // The manifest's command and "Check it with:" name the layout beside the output,
            // which outlives the window.
            // A repair that writes nothing leaves an earlier one's layout there as it was; one
            // the fix refuses at once (its output exists) never touches it.
            const QString kept = QFile::decodeName(request.layout.c_str());
            const bool refused =
                !request.force && QFileInfo::exists(QFile::decodeName(request.output.c_str()));
            KeptLayout beside;
            if (!generated.isEmpty() && kept != generated && !refused)
                if (auto error = beside.copy(generated, kept))
                    return *error;
            auto fixed = backend->fix(request, control);
            if (fixed && fixed->written)
                beside.keep();
            if (!fixed)
                return fixed.error();
            if (!fixed->written && !fixed->alreadyLoads)
                return makeError(Error::Code::Unsupported, repairBlockedText(*fixed).toStdString());
            return repairSummaryText(*fixed);
        },
        [this](QString summary) { Q_EMIT repaired(summary); });
}

void CheckpointSession::runLayerStats(const QString &family)
{
    InspectRequest request;
    request.path = native(m_path);
    request.filters = {familyGlob(family).toStdString()};
    request.stats = true;
    supersede(JobKind::LayerStats);
    auto backend = m_backend;
    m_runner->start<LayerStatsSnapshot>(
        {JobKind::LayerStats, tr("Statistics of %1").arg(family), Lane::Long, {}},
        [backend, request, family](const JobControl &control) -> Result<LayerStatsSnapshot> {
            auto result = backend->inspect(request, control);
            if (!result)
                return result.error();
            std::vector<std::pair<int, size_t>> found; // (layer, tensor)
            for (size_t i = 0; i < result->tensors.size(); ++i) {
                const InspectedTensor &t = result->tensors[i];
                const LayerKey k = layerKey(
                    QString::fromUtf8(t.entry->key.data(), qsizetype(t.entry->key.size())));
                if (k.family == family && t.health)
                    found.emplace_back(k.layer, i);
            }
            std::sort(found.begin(), found.end());
            auto stats = std::make_shared<LayerStats>();
            stats->family = family;
            for (const auto &[layer, i] : found) {
                stats->layers.push_back(layer);
                stats->keys.push_back(
                    QString::fromUtf8(result->tensors[i].entry->key.data(),
                                      qsizetype(result->tensors[i].entry->key.size())));
                stats->health.push_back(*result->tensors[i].health);
            }
            return LayerStatsSnapshot(std::move(stats));
        },
        [this](LayerStatsSnapshot stats) { Q_EMIT layerStatsChanged(stats); });
}

void CheckpointSession::requestTensorDetails(const QString &key)
{
    supersede(JobKind::Details);
    auto backend = m_backend;
    m_runner->start<TensorDetails>(
        {JobKind::Details, key, Lane::Quick, QStringLiteral("details")},
        [backend, index = m_index,
         k = key.toStdString()](const JobControl &control) -> Result<TensorDetails> {
            TensorDetails details = backend->tensorDetails(index, k, control);
            if (control.cancel.cancelled())
                return cancelledError();
            return details;
        },
        [this](TensorDetails details) { Q_EMIT tensorDetailsReady(details); });
}

void CheckpointSession::requestObject(const QString &key)
{
    supersede(JobKind::Object);
    auto backend = m_backend;
    m_runner->start<ObjectDetails>(
        {JobKind::Object, key, Lane::Quick, QStringLiteral("object")},
        [backend, index = m_index, k = key.toStdString()](const JobControl &) {
            return Result<ObjectDetails>(backend->objectDetails(index, k));
        },
        [this](ObjectDetails details) { Q_EMIT objectReady(details); });
}

} // namespace shardscope::model
