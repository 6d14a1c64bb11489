// SPDX-License-Identifier: MIT
#include "backendrunner.h"

#include "checkpointtreemodel.h"

#include "formatting.h"
#include "pyvalueformat.h"

#include <shardscope/checkpoint.h>
#include <shardscope/tensor.h>

#include <QDateTime>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QMutexLocker>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace shardscope::model {

/** One thread and its queue of tasks. */
class BackendRunner::Lane
{
public:
    explicit Lane(const QString &name)
    {
        m_thread.setObjectName(name);
        m_worker = new QObject;
        m_worker->moveToThread(&m_thread);
        m_thread.start();
    }
    ~Lane()
    {
        clear();
        m_thread.quit();
        m_thread.wait();
        delete m_worker;
    }

    /** Queues `fn`; a non-empty tag replaces a queued task of that tag. */
    void post(const QString &tag, std::function<void()> fn, std::function<void()> done)
    {
        {
            QMutexLocker lock(&m_mutex);
            if (!tag.isEmpty())
                m_pending -=
                    int(std::erase_if(m_queue, [&](const Task &t) { return t.tag == tag; }));
            m_queue.push_back({tag, std::move(fn)});
            ++m_pending;
        }
        // One wake-up per post; a wake-up that finds its task replaced finds the queue shorter.
        QMetaObject::invokeMethod(
            m_worker, [this, done = std::move(done)] { runNext(done); }, Qt::QueuedConnection);
    }
    /** Drops the queued tasks; returns how many. */
    int clear()
    {
        QMutexLocker lock(&m_mutex);
        const int n = int(m_queue.size());
        m_queue.clear();
        m_pending -= n;
        return n;
    }
    bool busy() const { return m_pending.load() > 0; }

private:
    struct Task
    {
        QString tag;
        std::function<void()> fn;
    };

    void runNext(const std::function<void()> &done)
    {
        Task task;
        {
            QMutexLocker lock(&m_mutex);
            if (m_queue.empty())
                return;
            task = std::move(m_queue.front());
            m_queue.pop_front();
        }
        task.fn();
        --m_pending;
        done();
    }

    QThread m_thread;
    QObject *m_worker = nullptr; ///< lives on m_thread; context for queued tasks
    QMutex m_mutex;
    std::deque<Task> m_queue; ///< guarded by m_mutex
    std::atomic<int> m_pending{0};
};

namespace {

// The long lane's progress as the owner sees it: at most every 100 ms and at each stage change,
// with the time left estimated from the stage's pace so far.
class ProgressThrottle
{
public:
    template<typename Emit>
    bool offer(const JobProgress &p, Emit &&emit)
    {
        using Clock = std::chrono::steady_clock;
        const auto now = Clock::now();
        const bool newStage = p.stage != m_stage;
        if (newStage) {
            m_stage = std::string(p.stage);
            m_stageStart = now;
        }
        const bool last = p.total && p.done >= p.total;
        if (!newStage && !last && now - m_last < std::chrono::milliseconds(100))
            return false;
        m_last = now;
        const int permille = p.total ? int(1000 * std::min(p.done, p.total) / p.total) : -1;
        double eta = -1;
        if (p.total && p.done > 0) {
            const double elapsed = std::chrono::duration<double>(now - m_stageStart).count();
            eta = elapsed * double(p.total - std::min(p.done, p.total)) / double(p.done);
        }
        emit(QString::fromStdString(m_stage), permille, eta);
        return true;
    }

private:
    std::string m_stage;
    std::chrono::steady_clock::time_point m_stageStart, m_last;
};

} // namespace

BackendRunner::BackendRunner(QObject *parent)
    : QObject(parent)
    , m_quick(new Lane(QStringLiteral("ShardScope backend")))
    , m_long(new Lane(QStringLiteral("ShardScope jobs")))
{
    registerMetaTypes();
}

BackendRunner::~BackendRunner()
{
    m_quick->clear();
    m_long->clear();
    ++m_generation; // whatever is running now delivers nothing
    {
        QMutexLocker lock(&m_jobMutex);
        for (auto &[id, token] : m_jobTokens)
            token.cancel();
    }
    delete m_long;
    delete m_quick;
}

bool BackendRunner::isBusy() const
{
    return m_quick->busy() || m_long->busy();
}

IndexSnapshot BackendRunner::workerIndex() const
{
    QMutexLocker lock(&m_indexMutex);
    return m_workerIndex;
}

IndexSnapshot BackendRunner::index(Slot slot) const
{
    return slot == Slot::Primary ? m_ownerIndex : m_ownerCompare;
}

void BackendRunner::settle()
{
    QMetaObject::invokeMethod(
        this,
        [this] {
            if (!isBusy())
                Q_EMIT idle();
        },
        Qt::QueuedConnection);
}

void BackendRunner::deliver(quint64 generation, std::function<void()> fn)
{
    QMetaObject::invokeMethod(
        this,
        [this, generation, fn = std::move(fn)] {
            if (generation == m_generation.load())
                fn();
        },
        Qt::QueuedConnection);
}

void BackendRunner::reportProgress(quint64 generation, int permille, const QString &message)
{
    deliver(generation, [this, permille, message] { Q_EMIT progress(permille, message); });
}

void BackendRunner::openCheckpoint(const QString &path, Slot slot)
{
    const bool primary = slot == Slot::Primary;
    std::atomic<quint64> &counter = primary ? m_generation : m_compareGeneration;
    const quint64 gen = ++counter;
    if (primary)
        cancelJobs(); // they were about the old checkpoint
    Q_EMIT progress(-1, tr("Opening %1…").arg(path));
    const std::string nativePath = QFile::encodeName(path).toStdString();
    // Results of an open are current while its slot has not been opened again.
    auto toOwner = [this, gen, &counter](std::function<void()> fn) {
        QMetaObject::invokeMethod(
            this,
            [gen, &counter, fn = std::move(fn)] {
                if (gen == counter.load())
                    fn();
            },
            Qt::QueuedConnection);
    };
    m_quick->post(
        primary ? QStringLiteral("open") : QStringLiteral("open-compare"),
        [this, gen, nativePath, primary, &counter, toOwner] {
            if (gen != counter.load())
                return;
            if (primary) {
                QMutexLocker lock(&m_indexMutex);
                m_workerIndex.reset();
            }
            QElapsedTimer timer;
            timer.start();
            // A .metadata lists its keys in its first quarter (of bytes; ~60% of the open at
            // DeepSeek-V3 scale): the tree is shown then, and filled in (problems, stored sizes)
            // when the rest is read.
            IndexSnapshot keysShown;
            qint64 keysMs = -1, keysTreeMs = 0;
            OpenOptions options;
            if (primary)
                options.onKeysKnown = [&](const CheckpointIndex &keys) {
                    if (gen != counter.load())
                        return;
                    keysMs = timer.elapsed();
                    auto tree = CheckpointTreeModel::prepareKeys(keys);
                    keysTreeMs = timer.elapsed() - keysMs;
                    keysShown = CheckpointTreeModel::indexOf(*tree);
                    toOwner([this, tree, shown = keysShown] {
                        m_preparedTree = {shown, tree};
                        Q_EMIT checkpointKeysKnown(shown);
                    });
                };
            Result<CheckpointIndex> opened = shardscope::openCheckpoint(nativePath, options);
            if (!opened) {
                const QString error = QString::fromStdString(opened.error().toString());
                toOwner([this, error] {
                    Q_EMIT progress(1000, tr("Open failed"));
                    Q_EMIT openFailed(error);
                });
                return;
            }
            auto snapshot = std::make_shared<const CheckpointIndex>(std::move(opened).value());
            {
                QMutexLocker lock(&m_indexMutex);
                (primary ? m_workerIndex : m_compareIndex) = snapshot;
            }
            // The tree the views show, built here: seconds at DeepSeek-V3 scale, never on the
            // owner's thread.
            std::shared_ptr<CheckpointTreeModel::Prepared> tree;
            const qint64 openMs = timer.elapsed();
            // The tree shown early stands when the finished index has the same entries.
            const bool completes =
                keysShown && CheckpointTreeModel::sameEntries(*keysShown, *snapshot);
            if (primary && !completes && gen == counter.load())
                tree = CheckpointTreeModel::prepare(snapshot);
            if (qEnvironmentVariableIsSet("SHARDSCOPE_TIMING")) {
                if (keysMs >= 0)
                    std::fprintf(stderr, "open: keys at %lld ms (their tree %lld ms)\n",
                                 static_cast<long long>(keysMs),
                                 static_cast<long long>(keysTreeMs));
                std::fprintf(stderr, "open: index %lld ms, tree %lld ms\n",
                             static_cast<long long>(openMs),
                             static_cast<long long>(timer.elapsed() - openMs));
            }
            const qint64 ms = timer.elapsed();
            toOwner([this, snapshot, ms, primary, tree, completes, keysShown] {
                Q_EMIT progress(1000, tr("Opened in %1 ms").arg(ms));
                if (primary) {
                    m_ownerIndex = snapshot;
                    m_preparedTree = {snapshot, tree};
                    m_completedKeys = completes ? std::pair{keysShown, snapshot}
                                                : std::pair<IndexSnapshot, IndexSnapshot>{};
                    Q_EMIT checkpointOpened(snapshot);
                } else {
                    m_ownerCompare = snapshot;
                    Q_EMIT compareCheckpointOpened(snapshot);
                }
            });
        },
        [this] { settle(); });
}

void BackendRunner::requestTensorDetails(const QString &key)
{
    const quint64 gen = m_generation.load();
    const quint64 request = ++m_detailsRequest;
    m_quick->post(
        QStringLiteral("tensor-details"),
        [this, gen, request, key] {
            auto current = [&] {
                return gen == m_generation.load() && request == m_detailsRequest.load();
            };
            if (!current())
                return;
            auto step = [&](int permille, const QString &message) {
                deliver(gen, [this, request, permille, message] {
                    if (request == m_detailsRequest.load())
                        Q_EMIT progress(permille, message);
                });
            };
            auto finish = [&](const TensorDetails &details) {
                deliver(gen, [this, request, key, details] {
                    if (request != m_detailsRequest.load())
                        return;
                    Q_EMIT progress(1000, details.ok() ? tr("Read %1").arg(key)
                                                       : tr("Could not read %1").arg(key));
                    Q_EMIT tensorDetailsReady(key, details);
                });
            };

            QElapsedTimer timer;
            timer.start();
            TensorDetails details;
            details.key = key;
            const IndexSnapshot index = workerIndex();
            const TensorEntry *entry = index ? index->findTensor(key.toStdString()) : nullptr;
            if (!entry) {
                details.error =
                    index ? tr("no tensor named '%1'").arg(key) : tr("no checkpoint is open");
                finish(details);
                return;
            }

            step(0, tr("Reading %1 (%2)…").arg(key, formatBytes(entry->nbytes())));
            Result<TensorData> data = readTensor(*index, *entry);
            if (!data) {
                details.error = QString::fromStdString(data.error().toString());
                details.elapsedMs = timer.elapsed();
                finish(details);
                return;
            }
            if (!current())
                return;

            // The one numerics path: the same kernels as `inspect --stats` and `verify`.
            step(400, tr("Statistics for %1…").arg(key));
            Result<TensorHealth> health = tensorHealth(*data);
            if (health) {
                details.hasStats = true;
                details.stats = *health;
            } else {
                details.statsError = QString::fromStdString(health.error().message);
            }
            if (!current())
                return;

            step(700, tr("Hashing %1…").arg(key));
            details.sha256 = QString::fromStdString(sha256Hex(*data));
            if (details.hasStats && details.stats.finite > 0 && !details.stats.histogram.empty())
                setHistogram(details);
            details.elapsedMs = timer.elapsed();
            finish(details);
        },
        [this] { settle(); });
}

void BackendRunner::requestObject(const QString &key)
{
    const quint64 gen = m_generation.load();
    const quint64 request = ++m_objectRequest;
    m_quick->post(
        QStringLiteral("object"),
        [this, gen, request, key] {
            if (gen != m_generation.load() || request != m_objectRequest.load())
                return;
            ObjectDetails details;
            details.key = key;
            const IndexSnapshot index = workerIndex();
            const ObjectEntry *entry = index ? index->findObject(key.toStdString()) : nullptr;
            if (!entry) {
                details.error =
                    index ? tr("no object named '%1'").arg(key) : tr("no checkpoint is open");
            } else if (entry->value) {
                details.summary = QString::fromStdString(entry->value->summary(80));
                details.text = formatPyValue(*entry->value);
            } else {
                Result<PyValue> value = readObject(*index, *entry);
                if (value) {
                    details.summary = QString::fromStdString(value->summary(80));
                    details.text = formatPyValue(*value);
                } else {
                    details.error = QString::fromStdString(value.error().toString());
                }
            }
            deliver(gen, [this, request, key, details] {
                if (request == m_objectRequest.load())
                    Q_EMIT objectReady(key, details);
            });
        },
        [this] { settle(); });
}

// ---------------------------------------------------------------- the long lane

std::shared_ptr<const LoadMarkSet>
BackendRunner::loadMarksFor(const DiffSnapshot &diff, const VerifySnapshot &verification) const
{
    for (const auto &marks : {m_verifyMarks, m_diffMarks})
        if (marks && marks->diff == diff && marks->verification == verification)
            return marks;
    return nullptr;
}

IndexSnapshot BackendRunner::keysCompletedBy(const IndexSnapshot &index) const
{
    return m_completedKeys.second == index ? m_completedKeys.first : nullptr;
}

std::shared_ptr<CheckpointTreeModel::Prepared>
BackendRunner::takePreparedTree(const IndexSnapshot &index)
{
    if (m_preparedTree.first != index)
        return nullptr;
    m_preparedTree.first.reset();
    return std::exchange(m_preparedTree.second, nullptr);
}

quint64 BackendRunner::startJob(const QString &title, Job job)
{
    const quint64 id = ++m_nextJob;
    const quint64 gen = m_generation.load();
    CancelToken cancel;
    {
        QMutexLocker lock(&m_jobMutex);
        m_jobTokens.emplace_back(id, cancel);
    }
    ++m_jobsPending;
    m_long->post(
        QString(),
        [this, id, gen, title, job = std::move(job), cancel] {
            runJob(id, gen, title, job, cancel);
        },
        [this] { settle(); });
    return id;
}

void BackendRunner::runJob(quint64 id, quint64 gen, const QString &title, const Job &job,
                           const CancelToken &cancel)
{
    auto forget = [this, id] {
        QMutexLocker lock(&m_jobMutex);
        std::erase_if(m_jobTokens, [id](const auto &t) { return t.first == id; });
    };
    if (cancel.cancelled() || gen != m_generation.load()) {
        forget();
        --m_jobsPending;
        deliver(gen, [this, id] { Q_EMIT jobCancelled(id); });
        return;
    }
    deliver(gen, [this, id, title] { Q_EMIT jobStarted(id, title); });
    ProgressThrottle throttle;
    JobControl control;
    control.cancel = cancel;
    control.progress = [&](const JobProgress &p) {
        throttle.offer(p, [&](const QString &stage, int permille, double eta) {
            deliver(gen, [this, id, stage, permille, eta] {
                Q_EMIT jobProgress(id, stage, permille, eta);
            });
        });
        return !cancel.cancelled();
    };
    JobOutcome outcome = job(control);
    forget();
    --m_jobsPending;
    if (outcome.cancelled || cancel.cancelled())
        deliver(gen, [this, id] { Q_EMIT jobCancelled(id); });
    else if (!outcome.error.isEmpty())
        deliver(gen, [this, id, error = outcome.error] { Q_EMIT jobFailed(id, error); });
    else
        deliver(gen, [this, id, value = outcome.value] { Q_EMIT jobFinished(id, value); });
}

void BackendRunner::cancelJob(quint64 id)
{
    QMutexLocker lock(&m_jobMutex);
    for (auto &[job, token] : m_jobTokens)
        if (job == id)
            token.cancel();
}

void BackendRunner::cancelJobs()
{
    QMutexLocker lock(&m_jobMutex);
    for (auto &[id, token] : m_jobTokens)
        token.cancel(); // queued ones answer jobCancelled when their turn comes
}

namespace {

BackendRunner::JobOutcome failed(const Error &e)
{
    BackendRunner::JobOutcome out;
    out.cancelled = e.code == Error::Code::Cancelled;
    out.error = QString::fromStdString(e.toString());
    return out;
}

} // namespace

quint64 BackendRunner::startDiff(DiffRequest request)
{
    if (!request.opened)
        request.opened = m_ownerIndex;
    const quint64 gen = m_generation.load();
    return startJob(tr("Diff against %1").arg(QString::fromStdString(request.layout)),
                    [this, gen, request](const JobControl &control) {
                        QElapsedTimer timer;
                        timer.start();
                        DiffRequest r = request;
                        // Keyed by path and modification time: an edited file is read again.
                        const QFileInfo info(QFile::decodeName(r.layout.c_str()));
                        const std::string cacheKey =
                            r.layout + '@' +
                            std::to_string(info.lastModified().toMSecsSinceEpoch()) + '@' +
                            std::to_string(info.size());
                        {
                            QMutexLocker lock(&m_layoutMutex);
                            if (!r.openedLayout && m_layoutCache.first == cacheKey)
                                r.openedLayout = m_layoutCache.second;
                        }
                        if (!r.openedLayout) {
                            auto layout = readLayout(r.layout);
                            if (!layout)
                                return failed(layout.error());
                            r.openedLayout = std::make_shared<const Layout>(std::move(*layout));
                            QMutexLocker lock(&m_layoutMutex);
                            m_layoutCache = {cacheKey, r.openedLayout};
                        }
                        auto diff = runDiff(r, control);
                        if (qEnvironmentVariableIsSet("SHARDSCOPE_TIMING"))
                            std::fprintf(stderr, "diff job: %lld ms\n",
                                         static_cast<long long>(timer.elapsed()));
                        if (!diff)
                            return failed(diff.error());
                        auto snapshot = std::make_shared<const DiffResult>(std::move(*diff));
                        // The tree's marks, here rather than on the owner's thread.
                        auto marks = loadMarks(snapshot, nullptr, r.opened);
                        if (qEnvironmentVariableIsSet("SHARDSCOPE_TIMING"))
                            std::fprintf(stderr, "diff job with marks: %lld ms\n",
                                         static_cast<long long>(timer.elapsed()));
                        deliver(gen, [this, snapshot, marks] {
                            m_diffMarks = marks;
                            Q_EMIT diffReady(snapshot);
                        });
                        return JobOutcome{QVariant::fromValue(DiffSnapshot(snapshot)), {}, false};
                    });
}

quint64 BackendRunner::startVerify(VerifyRequest request, DiffSnapshot diff)
{
    if (!request.opened)
        request.opened = m_ownerIndex;
    request.comm = nullptr; // one process plays every rank
    const quint64 gen = m_generation.load();
    return startJob(
        tr("Verify against %1").arg(QString::fromStdString(request.layout)),
        [this, gen, request, diff](const JobControl &control) {
            auto report = runVerify(request, control);
            if (!report)
                return failed(report.error());
            const bool cancelled = report->result.cancelled;
            auto snapshot = std::make_shared<const VerifyReport>(std::move(*report));
            auto marks = diff && !cancelled ? loadMarks(diff, snapshot, request.opened) : nullptr;
            if (!cancelled)
                deliver(gen, [this, snapshot, marks] {
                    if (marks)
                        m_verifyMarks = marks;
                    Q_EMIT verifyReady(snapshot);
                });
            return JobOutcome{QVariant::fromValue(VerifySnapshot(snapshot)), {}, cancelled};
        });
}

quint64 BackendRunner::startCompare(DiffOptions options)
{
    CheckpointDiffRequest request;
    request.firstOpened = m_ownerIndex;
    request.secondOpened = m_ownerCompare;
    request.options = std::move(options);
    const quint64 gen = m_generation.load();
    return startJob(tr("Compare checkpoints"), [this, gen, request](const JobControl &control) {
        if (!request.firstOpened || !request.secondOpened)
            return JobOutcome{{}, tr("open two checkpoints to compare"), false};
        auto diff = runCheckpointDiff(request, control);
        if (!diff)
            return failed(diff.error());
        auto snapshot = std::make_shared<const CheckpointDiff>(std::move(*diff));
        deliver(gen, [this, snapshot] { Q_EMIT compareReady(snapshot); });
        return JobOutcome{QVariant::fromValue(CompareSnapshot(snapshot)), {}, false};
    });
}

quint64 BackendRunner::startValueDiff(ValueDiffRequest request)
{
    request.firstOpened = m_ownerIndex;
    request.secondOpened = m_ownerCompare;
    request.comm = nullptr;
    const quint64 gen = m_generation.load();
    return startJob(tr("Compare values"), [this, gen, request](const JobControl &control) {
        if (!request.firstOpened || !request.secondOpened)
            return JobOutcome{{}, tr("open two checkpoints to compare"), false};
        auto values = runValueDiff(request, control);
        if (!values)
            return failed(values.error());
        const bool cancelled = values->cancelled;
        auto snapshot = std::make_shared<const ValueDiffResult>(std::move(*values));
        if (!cancelled)
            deliver(gen, [this, snapshot] { Q_EMIT valuesReady(snapshot); });
        return JobOutcome{QVariant::fromValue(ValuesSnapshot(snapshot)), {}, cancelled};
    });
}

} // namespace shardscope::model
