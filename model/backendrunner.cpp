// SPDX-License-Identifier: MIT
#include "backendrunner.h"

#include <QCoreApplication>
#include <QThread>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

namespace shardscope::model {

struct BackendRunner::Job
{
    JobInfo info;
    BackendRunner::Lane lane = BackendRunner::Lane::Long;
    QString tag;
    CancelToken cancel;
    Work work;
    std::function<void()> done;
    bool ended = false; ///< owner's thread only
};

/** One thread and its queue of jobs. */
class BackendRunner::Lane_
{
public:
    Lane_(BackendRunner *runner, const QString &name)
        : m_runner(runner)
    {
        m_thread = QThread::create([this] { loop(); });
        m_thread->setObjectName(name);
        m_thread->start();
    }
    ~Lane_()
    {
        {
            std::lock_guard lock(m_mutex);
            m_queue.clear();
            m_stop = true;
        }
        m_wake.notify_all();
        m_thread->wait();
        delete m_thread;
    }

    /** Queues `job`; returns the queued jobs it replaces (same non-empty tag). */
    std::vector<std::shared_ptr<Job>> post(std::shared_ptr<Job> job)
    {
        std::vector<std::shared_ptr<Job>> replaced;
        {
            std::lock_guard lock(m_mutex);
            if (!job->tag.isEmpty())
                std::erase_if(m_queue, [&](const std::shared_ptr<Job> &q) {
                    if (q->tag != job->tag)
                        return false;
                    replaced.push_back(q);
                    return true;
                });
            m_queue.push_back(std::move(job));
        }
        m_wake.notify_one();
        return replaced;
    }
    /** Takes `job` out of the queue; false when it has started (or was never queued here). */
    bool remove(const std::shared_ptr<Job> &job)
    {
        std::lock_guard lock(m_mutex);
        return std::erase(m_queue, job) > 0;
    }

private:
    void loop()
    {
        for (;;) {
            std::shared_ptr<Job> job;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [this] { return m_stop || !m_queue.empty(); });
                if (m_stop)
                    return;
                job = std::move(m_queue.front());
                m_queue.pop_front();
            }
            m_runner->execute(job);
        }
    }

    BackendRunner *m_runner;
    QThread *m_thread = nullptr;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<std::shared_ptr<Job>> m_queue; ///< guarded
    bool m_stop = false;                      ///< guarded
};

namespace {

// Progress as the owner sees it: at most every 100 ms and at each stage change, with the time
// left estimated from the stage's pace so far. A stage whose work is all done shows as busy:
// the job is finishing something else (a bar at 100% while a job runs on reads as stuck).
class ProgressThrottle
{
public:
    template<typename Emit>
    void offer(const JobProgress &p, Emit &&emit)
    {
        using Clock = std::chrono::steady_clock;
        const auto now = Clock::now();
        const bool newStage = p.stage != m_stage;
        if (newStage) {
            m_stage = std::string(p.stage);
            m_stageStart = now;
        }
        const bool complete = p.total && p.done >= p.total;
        if (!newStage && complete == m_complete && now - m_last < std::chrono::milliseconds(100))
            return;
        m_last = now;
        m_complete = complete;
        int permille = p.total && !complete ? int(1000 * p.done / p.total) : -1;
        double eta = -1;
        if (p.total && p.done > 0 && !complete) {
            const double elapsed = std::chrono::duration<double>(now - m_stageStart).count();
            eta = elapsed * double(p.total - p.done) / double(p.done);
        }
        emit(QString::fromStdString(m_stage), permille, eta);
    }

private:
    std::string m_stage;
    bool m_complete = false;
    std::chrono::steady_clock::time_point m_stageStart, m_last;
};

} // namespace

QString jobCancelledText()
{
    return QCoreApplication::translate("shardscope", "Cancelled");
}

BackendRunner::BackendRunner(QObject *parent)
    : QObject(parent)
    , m_quick(new Lane_(this, QStringLiteral("ShardScope quick")))
    , m_long(new Lane_(this, QStringLiteral("ShardScope jobs")))
{
    qRegisterMetaType<JobInfo>();
}

BackendRunner::~BackendRunner()
{
    for (const auto &job : m_jobs)
        job->cancel.cancel();
    delete m_long;
    delete m_quick;
}

void BackendRunner::toOwner(std::function<void()> fn)
{
    QMetaObject::invokeMethod(this, std::move(fn), Qt::QueuedConnection);
}

void BackendRunner::deliverWhileRunning(const CancelToken &token, std::function<void()> fn)
{
    toOwner([token, fn = std::move(fn)] {
        if (!token.cancelled())
            fn();
    });
}

quint64 BackendRunner::enqueue(JobSpec spec, Work work, std::function<void()> done)
{
    auto job = std::make_shared<Job>();
    job->info = {++m_nextId, spec.kind, std::move(spec.title)};
    job->lane = spec.lane;
    job->tag = std::move(spec.tag);
    job->work = std::move(work);
    job->done = std::move(done);
    m_jobs.push_back(job);
    const auto replaced = (job->lane == Lane::Quick ? m_quick : m_long)->post(job);
    for (const auto &old : replaced) {
        old->cancel.cancel();
        finish(old, std::nullopt);
    }
    return job->info.id;
}

void BackendRunner::execute(const std::shared_ptr<Job> &job)
{
    if (job->cancel.cancelled()) {
        toOwner([this, job] { finish(job, std::nullopt); });
        return;
    }
    toOwner([this, job] {
        if (!job->ended)
            Q_EMIT jobStarted(job->info);
    });
    ProgressThrottle throttle;
    JobControl control;
    control.cancel = job->cancel;
    control.progress = [&](const JobProgress &p) {
        throttle.offer(p, [&](const QString &stage, int permille, double eta) {
            toOwner([this, job, stage, permille, eta] {
                if (!job->ended)
                    Q_EMIT jobProgress(job->info, stage, permille, eta);
            });
        });
        return !job->cancel.cancelled();
    };
    std::optional<Error> error = job->work(control);
    job->work = nullptr; // what it captured goes now, on this lane
    toOwner([this, job, error = std::move(error)] { finish(job, error); });
}

void BackendRunner::finish(const std::shared_ptr<Job> &job, const std::optional<Error> &error)
{
    if (job->ended)
        return;
    job->ended = true;
    std::erase(m_jobs, job);
    const bool cancelled =
        job->cancel.cancelled() || (error && error->code == Error::Code::Cancelled);
    if (cancelled) {
        Q_EMIT jobEnded(job->info, false, jobCancelledText());
    } else if (error) {
        Q_EMIT jobEnded(job->info, false, QString::fromStdString(error->toString()));
    } else {
        if (job->done)
            job->done();
        Q_EMIT jobEnded(job->info, true, tr("Done"));
    }
    job->done = nullptr;
    if (m_jobs.empty())
        Q_EMIT idle();
}

void BackendRunner::cancel(quint64 id)
{
    cancelIf([id](const JobInfo &job) { return job.id == id; });
}

void BackendRunner::cancelIf(const std::function<bool(const JobInfo &)> &which)
{
    std::vector<std::shared_ptr<Job>> chosen;
    for (const auto &job : m_jobs)
        if (which(job->info))
            chosen.push_back(job);
    for (const auto &job : chosen) {
        job->cancel.cancel();
        // Not started: it ends now. Running: it ends when its work sees the token.
        if ((job->lane == Lane::Quick ? m_quick : m_long)->remove(job))
            finish(job, std::nullopt);
    }
}

std::vector<JobInfo> BackendRunner::jobs() const
{
    std::vector<JobInfo> out;
    out.reserve(m_jobs.size());
    for (const auto &job : m_jobs)
        out.push_back(job->info);
    return out;
}

bool BackendRunner::hasJob(const std::function<bool(const JobInfo &)> &which) const
{
    return std::any_of(m_jobs.begin(), m_jobs.end(),
                       [&](const std::shared_ptr<Job> &job) { return which(job->info); });
}

} // namespace shardscope::model
