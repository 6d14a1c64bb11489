// SPDX-License-Identifier: MIT
#include "checkpointsession.h"

#include <QFile>
#include <QFileInfo>

#include <fstream>

namespace shardscope::model {

CheckpointSession::CheckpointSession(QObject *parent)
    : QObject(parent)
    , m_runner(new BackendRunner(this))
{
    connect(m_runner, &BackendRunner::checkpointOpened, this, [this](const IndexSnapshot &index) {
        m_index = index;
        Q_EMIT opened(index);
    });
    connect(m_runner, &BackendRunner::compareCheckpointOpened, this,
            [this](const IndexSnapshot &index) {
                m_compareIndex = index;
                Q_EMIT compareOpened(index);
            });
    connect(m_runner, &BackendRunner::openFailed, this, &CheckpointSession::openFailed);
    connect(m_runner, &BackendRunner::diffReady, this, [this](const DiffSnapshot &diff) {
        m_diff = diff;
        Q_EMIT diffChanged(diff);
    });
    connect(m_runner, &BackendRunner::verifyReady, this, [this](const VerifySnapshot &report) {
        m_verification = report;
        Q_EMIT verificationChanged(report);
    });
    connect(m_runner, &BackendRunner::compareReady, this, [this](const CompareSnapshot &diff) {
        m_comparison = diff;
        Q_EMIT comparisonChanged(diff);
    });
    connect(m_runner, &BackendRunner::jobStarted, this, [this](quint64 id, const QString &title) {
        if (id == m_job)
            Q_EMIT jobStarted(title);
    });
    connect(m_runner, &BackendRunner::jobProgress, this,
            [this](quint64 id, const QString &stage, int permille, double eta) {
                if (id == m_job)
                    Q_EMIT jobProgress(stage, permille, eta);
            });
    auto ended = [this](quint64 id, bool ok, const QString &message) {
        if (id != m_job)
            return;
        m_job = 0;
        Q_EMIT jobEnded(ok, message);
    };
    connect(m_runner, &BackendRunner::jobFinished, this,
            [this, ended](quint64 id, const QVariant &value) {
                if (id == m_layoutJob) {
                    m_layoutJob = 0;
                    setLayout(value.toString());
                }
                ended(id, true, tr("Done"));
            });
    connect(m_runner, &BackendRunner::jobFailed, this,
            [ended](quint64 id, const QString &error) { ended(id, false, error); });
    connect(m_runner, &BackendRunner::jobCancelled, this,
            [ended](quint64 id) { ended(id, false, tr("Cancelled")); });
}

CheckpointSession::~CheckpointSession() = default;

void CheckpointSession::clearResults(bool diffToo)
{
    if (diffToo && m_diff) {
        m_diff.reset();
        Q_EMIT diffChanged(nullptr);
    }
    if (m_verification) {
        m_verification.reset();
        Q_EMIT verificationChanged(nullptr);
    }
}

void CheckpointSession::open(const QString &path)
{
    if (m_job) { // the runner cancels it: it was about the old checkpoint
        m_job = 0;
        Q_EMIT jobEnded(false, tr("Cancelled"));
    }
    m_path = path;
    m_index.reset();
    clearResults(true);
    if (m_comparison) {
        m_comparison.reset();
        Q_EMIT comparisonChanged(nullptr);
    }
    Q_EMIT opening(path);
    m_runner->openCheckpoint(path);
}

void CheckpointSession::reload()
{
    if (!m_path.isEmpty())
        open(m_path);
}

void CheckpointSession::openCompare(const QString &path)
{
    m_comparePath = path;
    m_compareIndex.reset();
    if (m_comparison) {
        m_comparison.reset();
        Q_EMIT comparisonChanged(nullptr);
    }
    m_runner->openCheckpoint(path, BackendRunner::Slot::Compare);
}

void CheckpointSession::setLayout(const QString &path)
{
    m_layoutPath = path;
    clearResults(true);
    Q_EMIT layoutChanged(path);
}

void CheckpointSession::setConfig(const QString &configPath, const LayoutOptions &options)
{
    if (!m_layoutDir.isValid()) {
        Q_EMIT jobEnded(false, tr("no temporary folder for the generated layout"));
        return;
    }
    const QString out =
        m_layoutDir.filePath(QStringLiteral("layout-%1.json").arg(++m_layoutSerial));
    const std::string config = QFile::encodeName(configPath).toStdString();
    const std::string path = QFile::encodeName(out).toStdString();
    if (m_job)
        m_runner->cancelJobs();
    m_layoutJob = m_runner->startJob(
        tr("Layout from %1").arg(QFileInfo(configPath).fileName()),
        [config, path, options, out](const JobControl &) -> BackendRunner::JobOutcome {
            auto layout = layoutFromConfig(config, options);
            if (!layout)
                return {{}, QString::fromStdString(layout.error().toString()), false};
            std::ofstream file(path, std::ios::binary | std::ios::trunc);
            file << layoutToJson(*layout);
            if (!file)
                return {{}, tr("cannot write %1").arg(out), false};
            return {QVariant(out), {}, false};
        });
    track(m_layoutJob);
}

// One job at a time: the callers cancel the running one first, so the newest asked for wins.
void CheckpointSession::track(quint64 job)
{
    m_job = job;
}

void CheckpointSession::runDiff(const DiffOptions &options)
{
    DiffRequest request;
    request.checkpoint = QFile::encodeName(m_path).toStdString();
    request.layout = QFile::encodeName(m_layoutPath).toStdString();
    request.options = options;
    request.opened = m_index;
    if (m_job)
        m_runner->cancelJobs();
    track(m_runner->startDiff(std::move(request)));
}

void CheckpointSession::runVerify(VerifyRequest request)
{
    request.checkpoint = QFile::encodeName(m_path).toStdString();
    request.layout = QFile::encodeName(m_layoutPath).toStdString();
    request.opened = m_index;
    if (m_job)
        m_runner->cancelJobs();
    track(m_runner->startVerify(std::move(request)));
}

void CheckpointSession::runCompare(const DiffOptions &options)
{
    if (m_job)
        m_runner->cancelJobs();
    track(m_runner->startCompare(options));
}

void CheckpointSession::cancel()
{
    m_runner->cancelJobs();
}

} // namespace shardscope::model
