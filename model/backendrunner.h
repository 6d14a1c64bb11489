// SPDX-License-Identifier: MIT
#pragma once

#include "tensordetails.h"

#include <QMutex>
#include <QObject>
#include <QString>
#include <QThread>

#include <atomic>
#include <deque>
#include <functional>

namespace shardscope::model {

/**
 * Runs every backend call on one dedicated thread, and hands results back to the thread that
 * owns the runner (the GUI thread) through queued calls.
 *
 * Requests are closures queued onto the backend thread. A tagged request replaces any queued,
 * not yet started request with the same tag, so a burst of selections computes only the last
 * one. Every result carries the generation it was asked for (one generation per opened
 * checkpoint) and, for details, the request it answers; results that are stale by the time
 * they reach the owner's thread are dropped there, never emitted.
 *
 * The runner's own methods and signals are for its owner's thread; listeners never see a
 * signal from the backend thread.
 */
class BackendRunner : public QObject
{
    Q_OBJECT

public:
    explicit BackendRunner(QObject *parent = nullptr);
    /** Drops queued requests and waits for the one running (if any) to finish. */
    ~BackendRunner() override;

    /** Incremented by every openCheckpoint(). */
    quint64 generation() const { return m_generation.load(); }
    /** Whether a request is queued or running. */
    bool isBusy() const;

public Q_SLOTS:
    /** Opens a checkpoint (file or directory); answers checkpointOpened or openFailed. */
    void openCheckpoint(const QString &path);
    /**
     * Reads the tensor of the current checkpoint and computes statistics, SHA-256 and a
     * histogram; answers tensorDetailsReady. Replaces a queued older details request.
     */
    void requestTensorDetails(const QString &key);
    /** Decodes a non-tensor entry; answers objectReady. Replaces a queued older one. */
    void requestObject(const QString &key);

Q_SIGNALS:
    void checkpointOpened(shardscope::model::IndexSnapshot index);
    void openFailed(const QString &error);
    void tensorDetailsReady(const QString &key, const shardscope::model::TensorDetails &details);
    void objectReady(const QString &key, const shardscope::model::ObjectDetails &details);
    /** permille in [0, 1000], or -1 while the amount of work is unknown. */
    void progress(int permille, const QString &message);
    /** Emitted when the queue runs empty (after the last result of a burst). */
    void idle();

private:
    struct Task
    {
        QString tag;
        std::function<void()> fn;
    };

    /** Queues `fn` on the backend thread; a non-empty tag replaces a queued task of that tag. */
    void post(const QString &tag, std::function<void()> fn);
    void runNext();
    /** Runs `fn` on the owner's thread if `generation` is still current. */
    void deliver(quint64 generation, std::function<void()> fn);
    void reportProgress(quint64 generation, int permille, const QString &message);

    QThread m_thread;
    QObject *m_worker = nullptr; ///< lives on m_thread; context for queued tasks

    QMutex m_mutex;
    std::deque<Task> m_queue; ///< guarded by m_mutex
    std::atomic<int> m_pending{0};

    std::atomic<quint64> m_generation{0};
    std::atomic<quint64> m_detailsRequest{0};
    std::atomic<quint64> m_objectRequest{0};

    IndexSnapshot m_workerIndex; ///< backend thread only
};

} // namespace shardscope::model
