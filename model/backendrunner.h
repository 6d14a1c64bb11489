// SPDX-License-Identifier: MIT
#pragma once

#include "job.h"

#include <shardscope/result.h>
#include <shardscope/session.h>

#include <QObject>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace shardscope::model {

/**
 * Runs work off the owner's thread (the GUI thread) and hands each job's result back to it,
 * once: a small executor in the manner of hotspot's JobTracker. It knows nothing of what a job
 * computes; CheckpointSession does.
 *
 * Two lanes, each one thread: the quick lane (opening, a tensor's details, objects) and the long
 * lane (diff, verify, compare, export, …), so that a verification never holds up the details of
 * a selection. A job is started with its work (run on its lane with a JobControl: throttled
 * progress, a cancel token) and its completion (run on the owner's thread with the work's value,
 * unless the job was cancelled first). Every job then announces itself exactly once each:
 * jobStarted, jobProgress (throttled: at most ten times a second and at each stage change, with
 * the time left estimated from the stage's pace), jobEnded. A cancelled job that has not started
 * ends at once; a running one ends when its work returns (the backend checks its token often).
 * A job with a tag replaces a queued, not yet started job with the same tag (which ends,
 * cancelled): a burst of selections computes only the last one.
 *
 * The runner's methods and signals are for its owner's thread; listeners never see a signal
 * from a lane.
 */
class BackendRunner : public QObject
{
    Q_OBJECT

public:
    enum class Lane { Quick, Long };

    /** What a job is: listeners see `kind` and `title`; `tag` replaces a queued twin. */
    struct JobSpec
    {
        JobKind kind = JobKind::Open;
        QString title;
        Lane lane = Lane::Long;
        QString tag;
    };

    explicit BackendRunner(QObject *parent = nullptr);
    /** Drops queued jobs, cancels running ones and waits for both lanes to finish. */
    ~BackendRunner() override;

    /**
     * Starts a job: `work(const JobControl &)` returns a Result<T> on the job's lane;
     * `done(T)` receives its value on the owner's thread, unless the job was cancelled by then.
     * An Error of code Cancelled ends the job cancelled, any other ends it failed with the
     * error's one line. Returns the job's id.
     */
    template<typename T, typename Work, typename Done>
    quint64 start(JobSpec spec, Work work, Done done)
    {
        auto value = std::make_shared<std::optional<T>>();
        return enqueue(
            std::move(spec),
            [value, work = std::move(work)](const JobControl &control) -> std::optional<Error> {
                Result<T> result = work(control);
                if (!result)
                    return std::move(result.error());
                value->emplace(std::move(*result));
                return std::nullopt;
            },
            [value, done = std::move(done)]() mutable { done(std::move(**value)); });
    }

    /**
     * Runs `fn` on the owner's thread, unless `token` is cancelled by then: what a running job
     * shows before it ends (a big checkpoint's tree while the rest of it is read). Any thread.
     */
    void deliverWhileRunning(const CancelToken &token, std::function<void()> fn);

    /** Cancels a job, queued or running. */
    void cancel(quint64 id);
    /** Cancels every job for which `which` holds. */
    void cancelIf(const std::function<bool(const JobInfo &)> &which);
    /** The jobs queued or running, in the order they were started. */
    std::vector<JobInfo> jobs() const;
    /** Whether a job `which` accepts is queued or running. */
    bool hasJob(const std::function<bool(const JobInfo &)> &which) const;
    bool isBusy() const { return !m_jobs.empty(); }

Q_SIGNALS:
    void jobStarted(const shardscope::model::JobInfo &job);
    /** permille in [0, 1000], or -1 while the amount of work is unknown (or a stage's work is
     *  done and the job is finishing); etaSeconds < 0: no estimate yet. */
    void jobProgress(const shardscope::model::JobInfo &job, const QString &stage, int permille,
                     double etaSeconds);
    /** Exactly once per job. ok false: failed or cancelled; `message` says which and why. */
    void jobEnded(const shardscope::model::JobInfo &job, bool ok, const QString &message);
    /** The last job ended and no other is queued or running. */
    void idle();

private:
    class Lane_;
    struct Job;
    using Work = std::function<std::optional<Error>(const JobControl &)>;

    quint64 enqueue(JobSpec spec, Work work, std::function<void()> done);
    /** On a lane: runs the job's work and posts its end to the owner. */
    void execute(const std::shared_ptr<Job> &job);
    /** On the owner's thread: the job's one end. */
    void finish(const std::shared_ptr<Job> &job, const std::optional<Error> &error);
    void toOwner(std::function<void()> fn);

    Lane_ *m_quick = nullptr;
    Lane_ *m_long = nullptr;
    quint64 m_nextId = 0;
    std::vector<std::shared_ptr<Job>> m_jobs; ///< queued or running; owner's thread only
};

} // namespace shardscope::model
