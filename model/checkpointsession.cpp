// SPDX-License-Identifier: MIT
#include "checkpointsession.h"

#include "layerfamily.h"
#include "reloadsummary.h"
#include "repairsummary.h"

#include <QFile>
#include <QFileInfo>

#include <shardscope/writefile.h>

namespace shardscope::model {

CheckpointSession::CheckpointSession(QObject *parent)
    : QObject(parent)
    , m_runner(new BackendRunner(this))
    , m_watcher(new QFileSystemWatcher(this))
{
    // A checkpoint rewritten or deleted while it is open: say so once; reload() reads it again.
    auto changed = [this] {
        if (!m_watcher->files().isEmpty() || !m_watcher->directories().isEmpty()) {
            m_watcher->removePaths(m_watcher->files() + m_watcher->directories());
            Q_EMIT changedOnDisk();
        }
    };
    connect(m_watcher, &QFileSystemWatcher::fileChanged, this, changed);
    connect(m_watcher, &QFileSystemWatcher::directoryChanged, this, changed);
    connect(m_runner, &BackendRunner::checkpointKeysKnown, this, &CheckpointSession::keysKnown);
    connect(m_runner, &BackendRunner::checkpointOpened, this, [this](const IndexSnapshot &index) {
        m_index = index;
        watch(m_path);
        Q_EMIT opened(index);
        if (IndexSnapshot before = std::exchange(m_beforeReload, {}); before && index) {
            m_reloadJob = m_runner->startJob(
                tr("Compare with the checkpoint before reloading"),
                [before, index](const JobControl &) -> BackendRunner::JobOutcome {
                    return {QVariant(describeReload(*before, *index)), {}, false};
                });
            track(m_reloadJob, JobKind::Reload);
        }
    });
    connect(m_runner, &BackendRunner::compareCheckpointOpened, this,
            [this](const IndexSnapshot &index) {
                m_compareIndex = index;
                Q_EMIT compareOpened(index);
            });
    connect(m_runner, &BackendRunner::openFailed, this, [this](const QString &error) {
        m_beforeReload.reset(); // the checkpoint is gone or broken: the error says which
        Q_EMIT openFailed(error);
    });
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
    connect(m_runner, &BackendRunner::valuesReady, this, [this](const ValuesSnapshot &values) {
        m_values = values;
        Q_EMIT valuesChanged(values);
    });
    connect(m_runner, &BackendRunner::jobStarted, this, [this](quint64 id, const QString &title) {
        if (!m_jobs.contains(id))
            return;
        m_jobKind = m_jobs.value(id);
        Q_EMIT jobStarted(title);
    });
    connect(m_runner, &BackendRunner::jobProgress, this,
            [this](quint64 id, const QString &stage, int permille, double eta) {
                if (!m_jobs.contains(id))
                    return;
                m_jobKind = m_jobs.value(id);
                Q_EMIT jobProgress(stage, permille, eta);
            });
    auto ended = [this](quint64 id, bool ok, const QString &message) {
        if (!m_jobs.contains(id))
            return;
        m_jobKind = m_jobs.take(id);
        Q_EMIT jobEnded(ok, message);
    };
    connect(m_runner, &BackendRunner::jobFinished, this,
            [this, ended](quint64 id, const QVariant &value) {
                // The layout job ends before the diff that its layout starts supersedes it.
                if (id == m_statsJob) {
                    m_statsJob = 0;
                    Q_EMIT layerStatsChanged(value.value<LayerStatsSnapshot>());
                }
                if (id == m_repairJob) {
                    m_repairJob = 0;
                    Q_EMIT repaired(value.toString());
                }
                if (id == m_reloadJob) {
                    m_reloadJob = 0;
                    Q_EMIT reloaded(value.toString());
                }
                const bool layout = id == m_layoutJob;
                if (layout)
                    m_layoutJob = 0;
                ended(id, true, tr("Done"));
                if (layout) {
                    m_configPath = m_pendingConfig;
                    m_layoutOptions = m_pendingOptions;
                    applyLayout(value.toString());
                }
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

void CheckpointSession::open(const QString &path)
{
    // The runner cancels every job: they were about the old checkpoint.
    const QHash<quint64, JobKind> jobs = std::exchange(m_jobs, {});
    for (auto it = jobs.begin(); it != jobs.end(); ++it) {
        m_jobKind = it.value();
        Q_EMIT jobEnded(false, tr("Cancelled"));
    }
    m_path = path;
    m_beforeReload.reset();
    m_index.reset();
    clearResults(true);
    clearComparison();
    Q_EMIT opening(path);
    m_runner->openCheckpoint(path);
}

void CheckpointSession::watch(const QString &path)
{
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
}

void CheckpointSession::reload()
{
    if (m_path.isEmpty())
        return;
    IndexSnapshot before = m_index;
    open(m_path);
    m_beforeReload = std::move(before);
}

void CheckpointSession::openCompare(const QString &path)
{
    m_comparePath = path;
    m_compareIndex.reset();
    clearComparison();
    m_runner->openCheckpoint(path, BackendRunner::Slot::Compare);
}

void CheckpointSession::setLayout(const QString &path)
{
    m_configPath.clear();
    m_layoutOptions = {};
    applyLayout(path);
}

void CheckpointSession::applyLayout(const QString &path)
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
    m_pendingConfig = configPath;
    m_pendingOptions = options;
    const std::string config = QFile::encodeName(configPath).toStdString();
    const std::string path = QFile::encodeName(out).toStdString();
    supersede(JobKind::Layout);
    m_layoutJob = m_runner->startJob(
        tr("Layout from %1").arg(QFileInfo(configPath).fileName()),
        [config, path, options, out](const JobControl &) -> BackendRunner::JobOutcome {
            auto layout = layoutFromConfig(config, options);
            if (!layout)
                return {{}, QString::fromStdString(layout.error().toString()), false};
            if (auto error = writeFileAtomically(path, layoutToJson(*layout)))
                return {{}, QString::fromStdString(error->toString()), false};
            return {QVariant(out), {}, false};
        });
    track(m_layoutJob, JobKind::Layout);
}

// The newest job of a kind wins; the one it replaces ends, cancelled. Other kinds run on.
void CheckpointSession::supersede(JobKind kind)
{
    const QList<quint64> ids = m_jobs.keys(kind);
    for (quint64 id : ids) {
        m_runner->cancelJob(id);
        m_jobs.remove(id);
        m_jobKind = kind;
        Q_EMIT jobEnded(false, tr("Cancelled"));
    }
}

void CheckpointSession::track(quint64 job, JobKind kind)
{
    m_jobs.insert(job, kind);
}

void CheckpointSession::runDiff(const DiffOptions &options)
{
    DiffRequest request;
    request.checkpoint = QFile::encodeName(m_path).toStdString();
    request.layout = QFile::encodeName(m_layoutPath).toStdString();
    request.options = options;
    request.opened = m_index;
    supersede(JobKind::Diff);
    clearResults(false); // a verification of other rules no longer says what this load does
    track(m_runner->startDiff(std::move(request)), JobKind::Diff);
}

void CheckpointSession::runVerify(VerifyRequest request)
{
    request.checkpoint = QFile::encodeName(m_path).toStdString();
    request.layout = QFile::encodeName(m_layoutPath).toStdString();
    request.opened = m_index;
    supersede(JobKind::Verify);
    track(m_runner->startVerify(std::move(request), m_diff), JobKind::Verify);
}

void CheckpointSession::runCompare(const DiffOptions &options)
{
    supersede(JobKind::Compare);
    track(m_runner->startCompare(options), JobKind::Compare);
}

void CheckpointSession::runValues(ValueDiffRequest request)
{
    request.first = QFile::encodeName(m_path).toStdString();
    request.second = QFile::encodeName(m_comparePath).toStdString();
    if (request.layout.empty() && !m_layoutPath.isEmpty())
        request.layout = QFile::encodeName(m_layoutPath).toStdString();
    supersede(JobKind::Values);
    track(m_runner->startValueDiff(std::move(request)), JobKind::Values);
}

bool CheckpointSession::layoutIsGenerated() const
{
    return !m_layoutPath.isEmpty() && m_layoutDir.isValid() &&
           QFileInfo(m_layoutPath).absolutePath() ==
               QFileInfo(m_layoutDir.path()).absoluteFilePath();
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
    const std::string out = QFile::encodeName(path).toStdString();
    supersede(JobKind::Export);
    track(m_runner->startJob(
              tr("Export %1").arg(QFileInfo(path).fileName()),
              [request, out, path](const JobControl &control) -> BackendRunner::JobOutcome {
                  auto report = runReport(request, control);
                  if (!report)
                      return {{}, QString::fromStdString(report.error().toString()), false};
                  // The previous report stays whole until the new one is complete.
                  if (auto error = writeFileAtomically(out, report->text))
                      return {{}, QString::fromStdString(error->toString()), false};
                  return {QVariant(path), {}, false};
              }),
          JobKind::Export);
}

void CheckpointSession::saveRepaired(FixRequest request)
{
    request.opened = m_index;
    if (request.checkpoint.empty())
        request.checkpoint = QFile::encodeName(m_path).toStdString();
    if (request.layout.empty())
        request.layout = QFile::encodeName(m_layoutPath).toStdString();
    supersede(JobKind::Repair);
    m_repairJob = m_runner->startJob(
        tr("Repair into %1").arg(QFileInfo(QFile::decodeName(request.output.c_str())).fileName()),
        [request](const JobControl &control) -> BackendRunner::JobOutcome {
            auto fixed = runFix(request, control);
            if (!fixed)
                return {{}, QString::fromStdString(fixed.error().toString()), false};
            if (!fixed->written && !fixed->alreadyLoads)
                return {{}, repairBlockedText(*fixed), false};
            return {QVariant(repairSummaryText(*fixed)), {}, false};
        });
    track(m_repairJob, JobKind::Repair);
}

void CheckpointSession::runLayerStats(const QString &family)
{
    InspectRequest request;
    request.path = QFile::encodeName(m_path).toStdString();
    request.filters = {familyGlob(family).toStdString()};
    request.stats = true;
    supersede(JobKind::LayerStats);
    m_statsJob = m_runner->startJob(
        tr("Statistics of %1").arg(family),
        [request, family](const JobControl &control) -> BackendRunner::JobOutcome {
            auto result = runInspect(request, control);
            if (!result)
                return {{}, QString::fromStdString(result.error().toString()), false};
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
            return {QVariant::fromValue(LayerStatsSnapshot(std::move(stats))), {}, false};
        });
    track(m_statsJob, JobKind::LayerStats);
}

void CheckpointSession::cancel()
{
    m_runner->cancelJobs();
}

} // namespace shardscope::model
