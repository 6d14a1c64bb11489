// SPDX-License-Identifier: MIT
#pragma once

#include "model/job.h"
#include "model/snapshots.h"
#include "model/tensordetails.h"
#include "windowservices.h"

#include <QMainWindow>

#include <functional>
#include <memory>

class QLabel;
class QTabWidget;
class QMenu;
class QProgressBar;
class QSplitter;
class QTimer;
class QToolButton;

namespace shardscope::model {
class CheckpointBackend;
class CheckpointSession;
class CheckpointFilterProxy;
class RemoteBackend;
class CheckpointTreeModel;
class ProblemListModel;
} // namespace shardscope::model

namespace shardscope::widgets {
class CheckpointTreeView;
class DiffPanel;
class FilterBar;
class ProblemsPanel;
class TensorDetailsPanel;
class ComparePanel;
class ElidedLabel;
class LayerPlot;
class ShardMapPlot;
class VerifyPanel;
} // namespace shardscope::widgets

namespace shardscope::gui {

/**
 * The composition root: creates the session (the one handle on the checkpoints, wherever they
 * are read), the models and the widgets, and wires the views to the session's staged signals;
 * each panel is bound to the session by a binder of its own (panelbinders.h). All the work
 * happens behind the session; this window only asks and reacts.
 */
class MainWindow : public QMainWindow, public WindowServices
{
    Q_OBJECT

public:
    /** A window on this machine's checkpoints. */
    explicit MainWindow(QWidget *parent = nullptr);
    /** A window whose session works through `backend` (a remote one, or a test's). */
    explicit MainWindow(std::shared_ptr<model::CheckpointBackend> backend,
                        QWidget *parent = nullptr);
    ~MainWindow() override;

    model::CheckpointSession *session() const { return m_session; }
    /** Opens a checkpoint directory or file (asynchronously); remembered as a recent file once
     *  open. One that fails to open leaves the one shown as it was. */
    void openPath(const QString &path);
    /** What the checkpoint is diffed against: a layout JSON, or one generated from a config
     *  (Hugging Face config.json, Megatron arguments, a checkpoint's saved args). */
    void setLayoutPath(const QString &path);
    void setConfigPath(const QString &path, const shardscope::LayoutOptions &options = {});
    /** The diff's rules, strictness and partial load (the diff panel's controls). */
    void setDiffOptions(const shardscope::DiffOptions &options);
    /** A second checkpoint to compare the open one with. */
    void setComparePath(const QString &path);
    /** Window geometry, splitters and the tree's columns from the last run (QSettings), the
     *  window kept within the screen it opens on. */
    void restoreSettings();
    /** Shrinks and moves the window into its screen's available geometry. */
    void fitToScreen();
    /** A layout or config was given: a diff is coming for the open checkpoint. */
    bool expectsDiff() const { return m_diffWanted || m_configPending; }
    /** Recently opened checkpoints, newest first. */
    static QStringList recentFiles();
    /** Filter text to apply once the next checkpoint is open. */
    void setInitialFilter(const QString &text) { m_initialFilter = text; }
    /** Show full keys as a flat list instead of the tree. */
    void setFlatList(bool on);
    /** The key to select once the next checkpoint is open (instead of none). */
    void setInitialSelection(const QString &key) { m_initialKey = key; }
    /** With no initial key, select the first tensor once open (screenshots). */
    void setSelectFirstTensor(bool on) { m_selectFirstTensor = on; }
    /** The entry whose details the panel shows or waits for; empty for none or a group. */
    QString detailsKey() const;
    /** The details panel still waits for the selected entry's details. */
    bool detailsPending() const;

    /** Verifies the load with the Verify panel's settings and the diff's rules. */
    void verifyLoad();
    /** Plots the selected tensor's family across layers (the Layers tab). */
    void plotLayers();
    /** Compares the two checkpoints value by value with the Compare panel's tolerances. */
    void compareValues();
    /**
     * Writes the current view's report to `path` (.md, .html or .json): a checkpoint compared
     * with another while the Compare panel is shown (its values once compared), else the load
     * diff. It is what `shardscope-cli` writes given reportArguments(): a layout generated from
     * a config is saved beside the report as PATH.layout.json so that the command stands alone.
     * The session's jobEnded says when it is written.
     */
    void exportReport(const QString &path);
    /**
     * Writes a repaired checkpoint of the open one into the new directory `output`: the keys
     * the load diff's options ask for, over hard-linked data (shardscope-cli fix). The session's
     * repaired() or jobEnded() says how it went.
     */
    void saveRepaired(const QString &output);
    /** The CLI arguments (from "shardscope-cli") of the report exportReport(path) writes. */
    QStringList reportArguments(const QString &path) const;
    /** The shell command that reproduces the current view: the diff, the verification or the
     *  comparison (with the layout step first when the layout came from a config). */
    QString reproCommand() const;
    /** Shows a panel: "problems", "diff", "verify" or "compare" below the tree; "details",
     *  "shards" or "layers" beside it. */
    void showPanel(const QString &name) override;
    /** Gives the bottom panel three fifths of the height when it is one of tables. */
    void makeRoomForPanel();
    /** Where Export and Save Repaired Checkpoint offer to write: the folder written to last,
     *  else the user's documents (never the checkpoint's own folder). */
    QString outputFolder() const;
    /** The diff panel's options (WindowServices). */
    shardscope::DiffOptions diffOptions() const override;
    QWidget *dialogParent() override;
    widgets::ShardMapPlot *shardMap() const { return m_shardMap; }
    widgets::LayerPlot *layerPlot() const { return m_layerPlot; }
    widgets::DiffPanel *diffPanel() const { return m_diffPanel; }
    widgets::VerifyPanel *verifyPanel() const { return m_verifyPanel; }
    widgets::ComparePanel *comparePanel() const { return m_comparePanel; }
    model::CheckpointTreeModel *treeModel() const { return m_treeModel; }

protected:
    void closeEvent(QCloseEvent *event) override;
    void showEvent(QShowEvent *event) override;
    void dragEnterEvent(QDragEnterEvent *event) override;
    void dropEvent(QDropEvent *event) override;

private:
    void createActions();
    void openDirectoryDialog();
    void openFileDialog();
    void reload();
    void onKeysKnown(const model::IndexSnapshot &keys);
    void onCheckpointOpened(const model::IndexSnapshot &index);
    /** The tree, problems and filter of `index` (the checkpoint shown); `completed`: its
     *  early tree was filled in instead. */
    void showCheckpoint(const model::IndexSnapshot &index, bool completed);
    void onOpenFailed(const QString &path, const QString &error);
    void onJobStarted(const model::JobInfo &job);
    void onJobProgress(const model::JobInfo &job, const QString &stage, int permille,
                       double etaSeconds);
    void onJobEnded(const model::JobInfo &job, bool ok, const QString &message);
    void onCurrentItemChanged(const QModelIndex &current);
    void onProblemActivated(const QString &key);
    void updateStatusBar();
    /** A message in the status bar (elided to its room, whole in its tooltip); a timeout in
     *  milliseconds clears it, 0 keeps it until the next. */
    void say(const QString &text, int timeoutMs = 0);
    void updateTitle();
    void addRecentFile(const QString &path);
    void offerReconnect(const QString &message);
    void runDiffWhenReady();
    void onDiffChanged(const model::DiffSnapshot &diff);
    void updateLoadMarks() override;
    void updateShardMap();
    void refilter(const std::function<void()> &apply);
    /** Matches a filter expands in full; more open the first levels only. */
    static constexpr quint64 MaxExpandedMatches = 5000;
    void selectStoredKey(const QString &key) override;
    void rebuildRecentMenu();
    void rememberOutputFolder(const QString &written);
    bool comparing() const;
    QString reportLayoutPath(const QString &reportPath) const;
    void showError(const QString &title, const QString &message) override;

    model::CheckpointSession *m_session = nullptr;
    /** The session's backend when the checkpoint is on another host (its paths are there). */
    std::shared_ptr<model::RemoteBackend> m_remote;
    model::CheckpointTreeModel *m_treeModel = nullptr;
    model::CheckpointFilterProxy *m_proxy = nullptr;
    model::ProblemListModel *m_problemModel = nullptr;

    widgets::FilterBar *m_filterBar = nullptr;
    widgets::CheckpointTreeView *m_tree = nullptr;
    widgets::TensorDetailsPanel *m_details = nullptr;
    widgets::ProblemsPanel *m_problems = nullptr;
    widgets::DiffPanel *m_diffPanel = nullptr;
    widgets::VerifyPanel *m_verifyPanel = nullptr;
    widgets::ComparePanel *m_comparePanel = nullptr;
    widgets::ShardMapPlot *m_shardMap = nullptr;
    widgets::LayerPlot *m_layerPlot = nullptr;
    QTabWidget *m_rightTabs = nullptr;
    QTabWidget *m_bottomTabs = nullptr;
    QSplitter *m_hsplit = nullptr;
    QSplitter *m_vsplit = nullptr;

    widgets::ElidedLabel *m_formatLabel = nullptr;
    widgets::ElidedLabel *m_problemsLabel = nullptr;
    widgets::ElidedLabel *m_messageLabel = nullptr;
    QTimer *m_messageTimer = nullptr;
    QProgressBar *m_jobProgress = nullptr;
    widgets::ElidedLabel *m_jobLabel = nullptr;
    QToolButton *m_cancelJob = nullptr;
    model::JobInfo m_shownJob; ///< the job the status bar follows (id 0: none)

    widgets::ElidedLabel *m_diffLabel = nullptr;
    QLabel *m_unstoredNote = nullptr; ///< above the tree: load problems no stored key holds
    QMenu *m_recentMenu = nullptr;
    bool m_diffWanted = false;    ///< a layout is set: diff each checkpoint opened
    bool m_roomOnShow = false;    ///< makeRoomForPanel() asked before the window was shown
    bool m_fitWithFrame = false;  ///< restoreSettings() fitted it before a frame was known
    bool m_configPending = false; ///< a layout is being generated from a config
    QString m_initialKey;
    QString m_shownPath; ///< the checkpoint the views show
    QString m_initialFilter;
    QAction *m_flatAction = nullptr;
    bool m_selectFirstTensor = false;
};

} // namespace shardscope::gui
