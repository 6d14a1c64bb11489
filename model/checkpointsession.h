// SPDX-License-Identifier: MIT
#pragma once

#include "backendrunner.h"
#include "layerstats.h"

#include <QFileSystemWatcher>
#include <QHash>
#include <QObject>
#include <QString>
#include <QTemporaryDir>

namespace shardscope::model {

/**
 * What the window is looking at: the open checkpoint (and a second one to compare it with), the
 * layout it is checked against, and the results of each stage (index → diff → verification;
 * comparison), each a read-only snapshot. It owns the BackendRunner and announces each stage
 * with a signal of its own, so that the window composes views that listen, instead of wiring
 * every result itself. Jobs of different kinds run one after another on the runner's long lane;
 * a new job of a kind supersedes the one of that kind still queued or running. A stage's result
 * is cleared (its signal carries null) when what it was
 * computed from changes: a new checkpoint clears everything, a new layout the diff and the
 * verification.
 */
class CheckpointSession : public QObject
{
    Q_OBJECT

public:
    /** What the session's current (or last) job computes. */
    enum class JobKind {
        None,
        Layout,
        Diff,
        Verify,
        Compare,
        Values,
        Export,
        LayerStats,
        Reload,
        Repair
    };
    Q_ENUM(JobKind)

    explicit CheckpointSession(QObject *parent = nullptr);
    ~CheckpointSession() override;

    BackendRunner *runner() const { return m_runner; }
    QString path() const { return m_path; }
    QString comparePath() const { return m_comparePath; }
    QString layoutPath() const { return m_layoutPath; }
    /** The config the layout was generated from, and its options; empty for a layout file. */
    QString configPath() const { return m_configPath; }
    shardscope::LayoutOptions layoutOptions() const { return m_layoutOptions; }
    /** The layout was generated from a config into the session's temporary folder (it goes
     *  when the session does). */
    bool layoutIsGenerated() const;
    IndexSnapshot index() const { return m_index; }
    IndexSnapshot compareIndex() const { return m_compareIndex; }
    DiffSnapshot diff() const { return m_diff; }
    VerifySnapshot verification() const { return m_verification; }
    CompareSnapshot comparison() const { return m_comparison; }
    ValuesSnapshot values() const { return m_values; }
    bool isJobRunning() const { return !m_jobs.isEmpty(); }
    /** The kind of the job jobStarted/jobProgress/jobEnded speak of (read it in their slots;
     *  kept after the job ends). */
    JobKind jobKind() const { return m_jobKind; }

public Q_SLOTS:
    void open(const QString &path);
    /** Opens the checkpoint again; once open, reloaded() says what changed on disk. */
    void reload();
    void openCompare(const QString &path);
    /** The layout JSON that diff and verify check against. */
    void setLayout(const QString &path);
    /**
     * The layout generated from a model config (Hugging Face config.json, Megatron arguments,
     * or a Megatron checkpoint's saved args) with the CLI's layout options, on the long lane;
     * it becomes the layout (layoutChanged) once written to the session's own temporary
     * folder. A failure ends the job with the backend's one-line error.
     */
    void setConfig(const QString &configPath, const shardscope::LayoutOptions &options = {});
    void runDiff(const shardscope::DiffOptions &options = {});
    /** The request's parallel overrides, rules and budget are kept; paths are the session's. */
    void runVerify(shardscope::VerifyRequest request = {});
    void runCompare(const shardscope::DiffOptions &options = {});
    /**
     * Both checkpoints value by value; the paths are the session's, and the layout (when the
     * request names none) the session's layout, so that both sides are read as the diff reads
     * them.
     */
    void runValues(shardscope::ValueDiffRequest request = {});
    /**
     * Renders the report `request` describes (its requests' opened indexes are filled from the
     * session) and writes it to `path`, on the long lane; jobEnded says whether it was written.
     */
    void exportReport(shardscope::ReportRequest request, const QString &path);
    /**
     * Writes a repaired checkpoint (shardscope-cli fix) of the open one, with the current
     * layout, on the long lane; repaired() says what it wrote, or the job fails naming what
     * blocks it (nothing is written then).
     */
    void saveRepaired(shardscope::FixRequest request);
    /**
     * Reads every tensor of a layer family (`decoder.layers.{i}.mlp.linear_fc1.weight`) and
     * computes its statistics with the health kernels, on the long lane; answers
     * layerStatsChanged.
     */
    void runLayerStats(const QString &family);
    /** Stops the running job (and the queued ones). */
    void cancel();

Q_SIGNALS:
    /** A repaired checkpoint was written: one paragraph saying what changed and how to check. */
    void repaired(const QString &summary);
    void opening(const QString &path);
    /** A big DCP checkpoint's keys are read (BackendRunner::checkpointKeysKnown): its tree
     *  can be shown; index() stays null until opened. */
    void keysKnown(shardscope::model::IndexSnapshot keys);
    void opened(shardscope::model::IndexSnapshot index);
    void openFailed(const QString &error);
    void compareOpened(shardscope::model::IndexSnapshot index);
    void layoutChanged(const QString &path);
    void diffChanged(shardscope::model::DiffSnapshot diff);
    void verificationChanged(shardscope::model::VerifySnapshot report);
    void comparisonChanged(shardscope::model::CompareSnapshot diff);
    void valuesChanged(shardscope::model::ValuesSnapshot values);
    void layerStatsChanged(shardscope::model::LayerStatsSnapshot stats);
    /** After reload(): what changed on disk since the previous open (describeReload()). */
    void reloaded(const QString &summary);
    /** The open checkpoint was written, replaced or deleted on disk (once per open). */
    void changedOnDisk();

    void jobStarted(const QString &title);
    /** Throttled by the runner. permille -1: unknown; etaSeconds < 0: no estimate yet. */
    void jobProgress(const QString &stage, int permille, double etaSeconds);
    /** ok false: failed or cancelled; message says which and why. */
    void jobEnded(bool ok, const QString &message);

private:
    /** Cancels the queued or running jobs of `kind` (a newer one replaces them); each ends. */
    void supersede(JobKind kind);
    void applyLayout(const QString &path);
    void track(quint64 job, JobKind kind);
    void clearResults(bool diffToo);
    void clearComparison();

    BackendRunner *m_runner;
    QString m_path, m_comparePath, m_layoutPath, m_configPath;
    shardscope::LayoutOptions m_layoutOptions;
    QString m_pendingConfig; ///< of the running setConfig() job
    shardscope::LayoutOptions m_pendingOptions;
    IndexSnapshot m_index, m_compareIndex;
    DiffSnapshot m_diff;
    VerifySnapshot m_verification;
    CompareSnapshot m_comparison;
    ValuesSnapshot m_values;
    QHash<quint64, JobKind> m_jobs; ///< the jobs queued or running, by id
    JobKind m_jobKind = JobKind::None;
    quint64 m_layoutJob = 0;      ///< the running setConfig() job; 0: none
    quint64 m_statsJob = 0;       ///< the running runLayerStats() job; 0: none
    quint64 m_repairJob = 0;      ///< the running saveRepaired() job; 0: none
    quint64 m_reloadJob = 0;      ///< the running comparison with the index before reload()
    IndexSnapshot m_beforeReload; ///< while reload() opens the checkpoint again
    QFileSystemWatcher *m_watcher;
    void watch(const QString &path);
    QTemporaryDir m_layoutDir; ///< generated layouts (never next to a checkpoint)
    int m_layoutSerial = 0;
};

} // namespace shardscope::model
