// SPDX-License-Identifier: MIT
#include "backendrunner.h"

#include "formatting.h"
#include "histogram.h"
#include "pyvalueformat.h"

#include <shardscope/checkpoint.h>
#include <shardscope/tensor.h>

#include <QElapsedTimer>
#include <QFile>
#include <QMutexLocker>

#include <cmath>

namespace shardscope::model {

BackendRunner::BackendRunner(QObject *parent)
    : QObject(parent)
{
    registerMetaTypes();
    m_thread.setObjectName(QStringLiteral("ShardScope backend"));
    m_worker = new QObject;
    m_worker->moveToThread(&m_thread);
    m_thread.start();
}

BackendRunner::~BackendRunner()
{
    {
        QMutexLocker lock(&m_mutex);
        m_queue.clear();
    }
    ++m_generation; // whatever is running now delivers nothing
    m_thread.quit();
    m_thread.wait();
    delete m_worker;
}

bool BackendRunner::isBusy() const
{
    return m_pending.load() > 0;
}

void BackendRunner::post(const QString &tag, std::function<void()> fn)
{
    {
        QMutexLocker lock(&m_mutex);
        if (!tag.isEmpty())
            m_pending -= int(std::erase_if(m_queue, [&](const Task &t) { return t.tag == tag; }));
        m_queue.push_back({tag, std::move(fn)});
        ++m_pending;
    }
    // One wake-up per post; a wake-up that finds its task replaced finds the queue shorter.
    QMetaObject::invokeMethod(
        m_worker, [this] { runNext(); }, Qt::QueuedConnection);
}

void BackendRunner::runNext()
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
    if (--m_pending == 0) {
        QMetaObject::invokeMethod(
            this,
            [this] {
                if (!isBusy())
                    Q_EMIT idle();
            },
            Qt::QueuedConnection);
    }
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

void BackendRunner::openCheckpoint(const QString &path)
{
    const quint64 gen = ++m_generation;
    Q_EMIT progress(-1, tr("Opening %1…").arg(path));
    const std::string nativePath = QFile::encodeName(path).toStdString();
    post(QStringLiteral("open"), [this, gen, nativePath] {
        if (gen != m_generation.load())
            return;
        m_workerIndex.reset();
        QElapsedTimer timer;
        timer.start();
        Result<CheckpointIndex> opened = shardscope::openCheckpoint(nativePath);
        if (!opened) {
            const QString error = QString::fromStdString(opened.error().toString());
            deliver(gen, [this, error] {
                Q_EMIT progress(1000, tr("Open failed"));
                Q_EMIT openFailed(error);
            });
            return;
        }
        auto snapshot = std::make_shared<const CheckpointIndex>(std::move(opened).value());
        m_workerIndex = snapshot;
        const qint64 ms = timer.elapsed();
        deliver(gen, [this, snapshot, ms] {
            Q_EMIT progress(1000, tr("Opened in %1 ms").arg(ms));
            Q_EMIT checkpointOpened(snapshot);
        });
    });
}

void BackendRunner::requestTensorDetails(const QString &key)
{
    const quint64 gen = m_generation.load();
    const quint64 request = ++m_detailsRequest;
    post(QStringLiteral("tensor-details"), [this, gen, request, key] {
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
        const IndexSnapshot index = m_workerIndex;
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

        step(400, tr("Statistics for %1…").arg(key));
        Result<TensorStats> stats = computeStats(*data);
        if (stats) {
            details.hasStats = true;
            details.stats = *stats;
        } else {
            details.statsError = QString::fromStdString(stats.error().message);
        }
        if (!current())
            return;

        step(600, tr("Hashing %1…").arg(key));
        details.sha256 = QString::fromStdString(sha256Hex(*data));
        if (!current())
            return;

        if (details.hasStats && details.stats.finite > 0) {
            step(800, tr("Histogram for %1…").arg(key));
            double lo = details.stats.min;
            double hi = details.stats.max;
            if (!(hi > lo)) {
                lo -= 0.5;
                hi += 0.5;
            }
            details.histogram = computeHistogram(*data, lo, hi, HistogramBins);
            details.histogramMin = lo;
            details.histogramMax = hi;
        }
        details.elapsedMs = timer.elapsed();
        finish(details);
    });
}

void BackendRunner::requestObject(const QString &key)
{
    const quint64 gen = m_generation.load();
    const quint64 request = ++m_objectRequest;
    post(QStringLiteral("object"), [this, gen, request, key] {
        if (gen != m_generation.load() || request != m_objectRequest.load())
            return;
        ObjectDetails details;
        details.key = key;
        const IndexSnapshot index = m_workerIndex;
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
    });
}

} // namespace shardscope::model
