// SPDX-License-Identifier: MIT
#pragma once

#include "checkpointtreemodel.h"
#include "tensordetails.h"

#include <QMutex>
#include <QObject>
#include <QString>
#include <QThread>
#include <QVariant>

#include <shardscope/session.h>

#include <atomic>
#include <deque>
#include <functional>

namespace shardscope::model {

/** The results of the long lane's jobs, shared read-only with every view. */
using DiffSnapshot = std::shared_ptr<const shardscope::DiffResult>;
using VerifySnapshot = std::shared_ptr<const shardscope::VerifyReport>;
using CompareSnapshot = std::shared_ptr<const shardscope::CheckpointDiff>;
using ValuesSnapshot = std::shared_ptr<const shardscope::ValueDiffResult>;

/**
 * Runs every backend call on two dedicated threads, its lanes, and hands results back to the
 * thread that owns the runner (the GUI thread) through queued calls.
 *
 * The quick lane opens checkpoints, reads a tensor's details and decodes objects. A tagged
 * request replaces any queued, not yet started request with the same tag, so a burst of
 * selections computes only the last one. Every result carries the generation it was asked for
 * (one generation per opened checkpoint) and, for details, the request it answers; results that
 * are stale by the time they reach the owner's thread are dropped there, never emitted.
 *
 * The long lane runs jobs that take minutes (diff, verify, compare, a caller's own job) one at
 * a time through the backend's front door (shardscope/session.h), so a verification never
 * blocks the tensor details. A job can be cancelled; its progress reaches the owner throttled
 * (at most ten times a second, and at every stage change) with an estimate of the time left.
 * Opening another primary checkpoint cancels the long lane's jobs: they were about the old one.
 *
 * Two checkpoints can be open at once: the primary one that the views show, and a second one
 * to compare it with.
 *
 * The runner's own methods and signals are for its owner's thread; listeners never see a
 * signal from a backend thread.
 */
class BackendRunner : public QObject
{
    Q_OBJECT

public:
    enum class Slot { Primary, Compare };
    Q_ENUM(Slot)

    /** What a job returns: a value for jobFinished, or an error. */
    struct JobOutcome
    {
        QVariant value;
        QString error; ///< empty on success
        bool cancelled = false;
    };
    using Job = std::function<JobOutcome(const shardscope::JobControl &)>;

    explicit BackendRunner(QObject *parent = nullptr);
    /** Drops queued requests, cancels the running job and waits for both lanes to finish. */
    ~BackendRunner() override;

    /** Incremented by every openCheckpoint() of the primary slot. */
    quint64 generation() const { return m_generation.load(); }
    /** Whether a request or job is queued or running on either lane. */
    bool isBusy() const;
    /** Whether a long job is queued or running. */
    bool isJobRunning() const { return m_jobsPending.load() > 0; }

    /** The checkpoints as last delivered to the owner (null until opened). */
    IndexSnapshot index(Slot slot = Slot::Primary) const;
    /**
     * The tree of the primary checkpoint `index`, built on the quick lane when it was opened,
     * for CheckpointTreeModel::adopt(); once (null after, or for another snapshot).
     */
    std::shared_ptr<CheckpointTreeModel::Prepared> takePreparedTree(const IndexSnapshot &index);
    /**
     * The early index (checkpointKeysKnown) whose tree the finished `index` completes
     * (CheckpointTreeModel::completeIndex()); null when the tree must be built anew.
     */
    IndexSnapshot keysCompletedBy(const IndexSnapshot &index) const;
    /** The load marks computed on the long lane with this diff (and verification), or null. */
    std::shared_ptr<const LoadMarkSet> loadMarksFor(const DiffSnapshot &diff,
                                                    const VerifySnapshot &verification) const;

public Q_SLOTS:
    /**
     * Opens a checkpoint (file or directory) into a slot; answers checkpointOpened (primary),
     * compareCheckpointOpened, or openFailed.
     */
    void openCheckpoint(const QString &path, shardscope::model::BackendRunner::Slot slot = {});
    /**
     * Reads the tensor of the current checkpoint and computes its health (the backend's kernels,
     * as `inspect --stats` and `verify`), SHA-256 and histogram; answers tensorDetailsReady.
     * Replaces a queued older details request.
     */
    void requestTensorDetails(const QString &key);
    /** Decodes a non-tensor entry; answers objectReady. Replaces a queued older one. */
    void requestObject(const QString &key);

public:
    /**
     * Queues a job on the long lane; answers jobFinished(id, value), jobFailed or jobCancelled.
     * Returns the job's id.
     */
    quint64 startJob(const QString &title, Job job);
    /** The primary checkpoint (as open) against a layout; answers diffReady. */
    quint64 startDiff(shardscope::DiffRequest request);
    /** The real load, checked bit for bit; answers verifyReady. With `diff` (the diff the
     *  window shows), the tree's marks for the result are computed on the lane too. */
    quint64 startVerify(shardscope::VerifyRequest request, DiffSnapshot diff = nullptr);
    /** The primary checkpoint against the compare slot's; answers compareReady. */
    quint64 startCompare(shardscope::DiffOptions options = {});
    /** Both open checkpoints value by value (the paths and opened indexes are the runner's);
     *  answers valuesReady. */
    quint64 startValueDiff(shardscope::ValueDiffRequest request);
    /** Cancels the running job and drops the queued ones (each answers jobCancelled). */
    void cancelJobs();
    /** Cancels one job, running or queued (it answers jobCancelled). */
    void cancelJob(quint64 id);

Q_SIGNALS:
    /**
     * A DCP checkpoint's keys are read, its storage locations not yet: the early index (keys,
     * nesting, shapes, dtypes only) and its tree (takePreparedTree()). checkpointOpened
     * follows, or openFailed.
     */
    void checkpointKeysKnown(shardscope::model::IndexSnapshot keys);
    void checkpointOpened(shardscope::model::IndexSnapshot index);
    void compareCheckpointOpened(shardscope::model::IndexSnapshot index);
    void openFailed(const QString &error);
    void tensorDetailsReady(const QString &key, const shardscope::model::TensorDetails &details);
    void objectReady(const QString &key, const shardscope::model::ObjectDetails &details);
    /** permille in [0, 1000], or -1 while the amount of work is unknown. */
    void progress(int permille, const QString &message);
    /** Emitted when both lanes run empty (after the last result of a burst). */
    void idle();

    void jobStarted(quint64 id, const QString &title);
    /** Throttled. permille -1: unknown; etaSeconds < 0: no estimate yet. */
    void jobProgress(quint64 id, const QString &stage, int permille, double etaSeconds);
    void jobFinished(quint64 id, const QVariant &value);
    void jobFailed(quint64 id, const QString &error);
    void jobCancelled(quint64 id);
    void diffReady(shardscope::model::DiffSnapshot diff);
    void verifyReady(shardscope::model::VerifySnapshot report);
    void compareReady(shardscope::model::CompareSnapshot diff);
    void valuesReady(shardscope::model::ValuesSnapshot values);

private:
    class Lane;
    struct QueuedJob;

    /** The quick lane's current checkpoint (any thread). */
    IndexSnapshot workerIndex() const;
    /** Runs `fn` on the owner's thread if `generation` is still current. */
    void deliver(quint64 generation, std::function<void()> fn);
    void reportProgress(quint64 generation, int permille, const QString &message);
    void runJob(quint64 id, quint64 generation, const QString &title, const Job &job,
                const shardscope::CancelToken &cancel);
    void settle();

    Lane *m_quick = nullptr;
    Lane *m_long = nullptr;

    std::atomic<quint64> m_generation{0};
    std::atomic<quint64> m_compareGeneration{0};
    std::atomic<quint64> m_detailsRequest{0};
    std::atomic<quint64> m_objectRequest{0};
    std::atomic<int> m_jobsPending{0};
    quint64 m_nextJob = 0;

    mutable QMutex m_indexMutex;
    IndexSnapshot m_workerIndex;                ///< the quick lane's current checkpoint; guarded
    IndexSnapshot m_compareIndex;               ///< guarded
    IndexSnapshot m_ownerIndex, m_ownerCompare; ///< as delivered; owner's thread only
    /** The tree built with the primary index; owner's thread only. */
    std::pair<IndexSnapshot, std::shared_ptr<CheckpointTreeModel::Prepared>> m_preparedTree;
    /** (early index, finished index) when the second completes the first's tree. */
    std::pair<IndexSnapshot, IndexSnapshot> m_completedKeys;
    /** The last computed for a diff, and for a verification; owner's thread only. */
    std::shared_ptr<const LoadMarkSet> m_diffMarks, m_verifyMarks;
    /** The layout the last diff read, by path: a rule toggle does not read it again. */
    QMutex m_layoutMutex;
    std::pair<std::string, std::shared_ptr<const shardscope::Layout>> m_layoutCache; ///< guarded

    QMutex m_jobMutex;
    std::vector<std::pair<quint64, shardscope::CancelToken>> m_jobTokens; ///< guarded
};

} // namespace shardscope::model

Q_DECLARE_METATYPE(shardscope::model::DiffSnapshot)
Q_DECLARE_METATYPE(shardscope::model::VerifySnapshot)
Q_DECLARE_METATYPE(shardscope::model::CompareSnapshot)
Q_DECLARE_METATYPE(shardscope::model::ValuesSnapshot)
