// SPDX-License-Identifier: MIT
#pragma once

#include "checkpointtreemodel.h"
#include "job.h"
#include "layerstats.h"
#include "loadmarks.h"
#include "snapshots.h"
#include "tensordetails.h"

#include <shardscope/layout.h>
#include <shardscope/remote.h>

#include <QFileSystemWatcher>
#include <QMutex>
#include <QObject>
#include <QString>
#include <QTemporaryDir>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace shardscope::model {

class BackendRunner;
class CheckpointBackend;

/**
 * The one handle the window holds on what it looks at: the open checkpoint (and a second one
 * to compare it with), the layout it is checked against, and the results of each stage (index
 * → diff → verification; comparison; a family's statistics), each a read-only snapshot. Where
 * the work runs is a CheckpointBackend behind it (this process, or a server on the machine that
 * holds the checkpoint); the threads are its own. The window asks with a call and listens to one
 * signal per stage, never to the threads.
 *
 * Every job is announced once each by jobStarted, jobProgress and jobEnded (a selection's details
 * and objects, quietly, by their own signals). A new job of a kind supersedes the one of that
 * kind still queued or running, which ends cancelled. A stage's result is cleared (its signal
 * carries null) when what it was computed from changes: a newly opened checkpoint clears
 * everything, a new layout the diff and the verification. A checkpoint that fails to open
 * changes nothing: the one before stays, with its results.
 */
class CheckpointSession : public QObject
{
    Q_OBJECT

public:
    /** A session over this process's backend. */
    explicit CheckpointSession(QObject *parent = nullptr);
    explicit CheckpointSession(std::shared_ptr<CheckpointBackend> backend,
                               QObject *parent = nullptr);
    ~CheckpointSession() override;

    /** Where the checkpoints live (CheckpointBackend::location()): empty for this machine. */
    QString location() const;
    /** The checkpoint shown: empty until one opened. */
    QString path() const { return m_path; }
    /** The checkpoint being opened; empty when none is. */
    QString openingPath() const { return m_openingPath; }
    /** The checkpoint compared with, as its host names it (compareLocation() says where). */
    QString comparePath() const { return m_comparePath; }
    /** Where the checkpoint compared with lives: empty for this machine, else its host (which
     *  may differ from location()). */
    QString compareLocation() const { return m_compareLocation; }
    /** How openCompare() connects to a host other than the session's: the window's own
     *  connection (its prompts); by default the system's ssh with the session's server. */
    using RemoteConnector = std::function<Result<std::shared_ptr<CheckpointBackend>>(
        const shardscope::RemoteTarget &target)>;
    void setRemoteConnector(RemoteConnector connector);
    QString layoutPath() const { return m_layoutPath; }
    /** The config the layout was generated from, and its options; empty for a layout file. */
    QString configPath() const { return m_configPath; }
    shardscope::LayoutOptions layoutOptions() const { return m_layoutOptions; }
    /** The layout was generated from a config into the session's temporary folder (it goes
     *  when the session does). */
    bool layoutIsGenerated() const;
    /** The layout in words, never its temporary path: "layout.json", "the layout of
     *  config.json"; empty without one. */
    QString layoutName() const;
    /**
     * The layout a report or repaired checkpoint written at `output` names, so that its
     * command runs after the window is closed: a generated layout is saved beside the output
     * as OUTPUT.layout.json by the job that writes it; a layout file is named as it is.
     */
    QString keptLayoutPath(const QString &output) const;
    /**
     * The layout a repaired checkpoint written at `output` names: keptLayoutPath(output) here;
     * on another host OUTPUT.layout.json there, where the server writes the layout that
     * travelled with the repair (shardscope/remote.h's layoutBesideOutput()).
     */
    QString repairLayoutPath(const QString &output) const;
    IndexSnapshot index() const { return m_index; }
    IndexSnapshot compareIndex() const { return m_compareIndex; }
    DiffSnapshot diff() const { return m_diff; }
    VerifySnapshot verification() const { return m_verification; }
    CompareSnapshot comparison() const { return m_comparison; }
    ValuesSnapshot values() const { return m_values; }
    /** What the load does with each stored key, from diff() and verification() (computed with
     *  them off the GUI thread; here when a caller set neither). Null without a diff. */
    std::shared_ptr<const LoadMarkSet> loadMarks() const;
    /** The diff's problem entries folded as the report folds them, off the GUI thread by the
     *  diff's job after diffChanged (loadProblemsChanged); null until then, and without a diff. */
    FoldedProblemsSnapshot loadProblems() const { return m_loadProblems; }
    /**
     * The tree of `index` (keysKnown or opened), built off the GUI thread, for
     * CheckpointTreeModel::adopt(); once (null after, or for another snapshot).
     */
    std::shared_ptr<CheckpointTreeModel::Prepared> takePreparedTree(const IndexSnapshot &index);
    /** The early index (keysKnown) whose tree the opened `index` completes
     *  (CheckpointTreeModel::completeIndex()); null when the tree must be built anew. */
    IndexSnapshot keysCompletedBy(const IndexSnapshot &index) const;

    /** Entries from which an open shows the top-level rows before the whole tree (keysKnown);
     *  100,000 unless a test sets it. */
    static void setTopRowsFirstFrom(size_t entries);
    /** False once a remote backend's connection is gone (reconnect()). */
    bool connected() const;

    /** Whether a job (anything but details and objects) is queued or running. */
    bool isJobRunning() const;
    /** The jobs queued or running, oldest first. */
    std::vector<JobInfo> jobs() const;

public Q_SLOTS:
    /** Opens a checkpoint (file or directory): opening, then opened or openFailed. */
    void open(const QString &path);
    /** Opens the checkpoint again; once open, reloaded() says what changed on disk. */
    void reload();
    /**
     * Opens a checkpoint to compare with: a path where the open one lives, or on a host
     * (`[user@]host[:port]:/path`, `ssh://host/path`; this session's connection when it is its
     * host, else one of its own). The structure of checkpoints in two places is compared here,
     * over both indexes (no tensor data moves); their values (runValues()) by each stored
     * tensor's SHA-256, computed where each lives (shardscope/session.h's valuesByHash()).
     */
    void openCompare(const QString &path);
    /** A checkpoint on this machine to compare with, wherever the open one lives. */
    void openCompareHere(const QString &path);
    /** The layout JSON that diff and verify check against. */
    void setLayout(const QString &path);
    /**
     * The layout generated from a model config (Hugging Face config.json, Megatron arguments,
     * or a Megatron checkpoint's saved args) with the CLI's layout options, as a job; it
     * becomes the layout (layoutChanged) once written to the session's own temporary folder. A
     * failure ends the job with the backend's one-line error.
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
     * session; a generated layout is saved at keptLayoutPath(path) first) and writes it to
     * `path`; exported() says it was written.
     */
    void exportReport(shardscope::ReportRequest request, const QString &path);
    /**
     * Writes a repaired checkpoint (shardscope-cli fix) of the open one, with the current
     * layout (saved at keptLayoutPath(output) when generated); repaired() says what it wrote,
     * or the job fails naming what blocks it (nothing is written then).
     */
    void saveRepaired(shardscope::FixRequest request);
    /**
     * Reads every tensor of a layer family (`decoder.layers.{i}.mlp.linear_fc1.weight`) and
     * computes its statistics with the health kernels; answers layerStatsChanged.
     */
    void runLayerStats(const QString &family);
    /** Reads a tensor of the open checkpoint and computes its statistics, SHA-256 and
     *  histogram; answers tensorDetailsReady. Replaces an older request not yet answered. */
    void requestTensorDetails(const QString &key);
    /** Decodes a non-tensor entry; answers objectReady. Replaces an older request. */
    void requestObject(const QString &key);
    /** A new connection for a remote backend whose connection was lost (a job, Open's kind),
     *  then the checkpoint opened again; what is shown stays until then. */
    void reconnect();
    /** Stops every job (details and objects aside): each ends, cancelled. */
    void cancel();
    /** Stops the jobs of one kind. */
    void cancelKind(shardscope::model::JobKind kind);

Q_SIGNALS:
    void opening(const QString &path);
    /** A big DCP checkpoint's keys are read, its storage locations not yet, or a big index is
     *  read whole and its top-level rows are known (CheckpointTreeModel::prepareTop()) while
     *  the rest of its tree is built: that tree can be shown (takePreparedTree()); index() is
     *  still the previous checkpoint's. */
    void keysKnown(shardscope::model::IndexSnapshot keys);
    void opened(shardscope::model::IndexSnapshot index);
    /** The checkpoint at `path` could not be opened (one line); nothing else changed. */
    void openFailed(const QString &path, const QString &error);
    void compareOpened(shardscope::model::IndexSnapshot index);
    void compareOpenFailed(const QString &path, const QString &error);
    void layoutChanged(const QString &path);
    void diffChanged(shardscope::model::DiffSnapshot diff);
    /** diff()'s problems folded (loadProblems()). */
    void loadProblemsChanged(shardscope::model::FoldedProblemsSnapshot folded);
    void verificationChanged(shardscope::model::VerifySnapshot report);
    void comparisonChanged(shardscope::model::CompareSnapshot diff);
    void valuesChanged(shardscope::model::ValuesSnapshot values);
    void layerStatsChanged(shardscope::model::LayerStatsSnapshot stats);
    void tensorDetailsReady(const shardscope::model::TensorDetails &details);
    void objectReady(const shardscope::model::ObjectDetails &details);
    /** After reload(): what changed on disk since the previous open (describeReload()). */
    void reloaded(const QString &summary);
    /** The open checkpoint's contents changed on disk: a file written, replaced, added or
     *  deleted (never its link count or access time); once per open. */
    void changedOnDisk();
    /** A repaired checkpoint was written: one paragraph saying what changed and how to check. */
    void repaired(const QString &summary);
    /** reconnect() connected again (the checkpoint is being opened again). */
    void reconnected();
    /** A report was written to `path` (and its layout beside it, when generated). */
    void exported(const QString &path);

    void jobStarted(const shardscope::model::JobInfo &job);
    /** Throttled. permille -1: unknown; etaSeconds < 0: no estimate yet. */
    void jobProgress(const shardscope::model::JobInfo &job, const QString &stage, int permille,
                     double etaSeconds);
    /** ok false: failed or cancelled; message says which and why (one line). */
    void jobEnded(const shardscope::model::JobInfo &job, bool ok, const QString &message);

private:
    struct Opened;
    struct DiskState;

    /** Cancels the queued or running jobs of `kind` (a newer one replaces them); each ends. */
    void supersede(JobKind kind);
    void applyLayout(const QString &path);
    void clearResults(bool diffToo);
    void clearComparison();
    /** Opens `path` through `backend`, or through a connection to `target` made on the lane. */
    void openCompareAt(const QString &path, const QString &file,
                       std::shared_ptr<CheckpointBackend> backend,
                       std::optional<shardscope::RemoteTarget> target);
    /** The checkpoint compared with lives elsewhere than the open one. */
    bool compareAcross() const;
    void adoptOpened(const QString &path, const Opened &result);
    void watch(const QString &path);
    void onWatched();
    /** The layout at `path`, read once per version of the file (any thread). */
    Result<std::shared_ptr<const Layout>> cachedLayout(const std::string &path);

    std::shared_ptr<CheckpointBackend> m_backend;
    /** Where the checkpoint compared with was opened (m_backend, or another place's). */
    std::shared_ptr<CheckpointBackend> m_compareBackend;
    QString m_compareLocation;
    RemoteConnector m_connector;
    BackendRunner *m_runner;
    QString m_path, m_openingPath, m_comparePath, m_compareOpeningPath, m_layoutPath, m_configPath;
    shardscope::LayoutOptions m_layoutOptions;
    IndexSnapshot m_index, m_compareIndex;
    DiffSnapshot m_diff;
    VerifySnapshot m_verification;
    CompareSnapshot m_comparison;
    ValuesSnapshot m_values;
    /** The marks computed with the last diff, and with the last verification. */
    std::shared_ptr<const LoadMarkSet> m_diffMarks, m_verifyMarks;
    FoldedProblemsSnapshot m_loadProblems; ///< of m_diff
    /** The tree built with an index (keys or opened), until taken. */
    std::pair<IndexSnapshot, std::shared_ptr<CheckpointTreeModel::Prepared>> m_preparedTree;
    /** (early index, opened index) when the second completes the first's tree. */
    std::pair<IndexSnapshot, IndexSnapshot> m_completedKeys;
    IndexSnapshot m_beforeReload; ///< while reload() opens the checkpoint again
    QFileSystemWatcher *m_watcher;
    std::unique_ptr<DiskState> m_disk; ///< what the watched paths held when opened
    QTemporaryDir m_layoutDir;         ///< generated layouts (never next to a checkpoint)
    int m_layoutSerial = 0;
    /** The layout the last diff read, by path, modification time and size: a rule toggle
     *  does not read it again. Guarded: the lanes use it. */
    QMutex m_layoutMutex;
    std::pair<std::string, std::shared_ptr<const Layout>> m_layoutCache;
};

} // namespace shardscope::model
