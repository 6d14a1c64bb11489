// SPDX-License-Identifier: MIT
#pragma once

#include "model/backendrunner.h"
#include "model/tensordetails.h"
#include "windowservices.h"

#include <QMainWindow>

#include <functional>

class QLabel;
class QTabWidget;
class QMenu;
class QProgressBar;
class QSplitter;
class QToolButton;

namespace shardscope::model {
class CheckpointSession;
class CheckpointFilterProxy;
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
class LayerPlot;
class ShardMapPlot;
class VerifyPanel;
} // namespace shardscope::widgets

namespace shardscope::gui {

/**
 * The composition root: creates the session (which owns the backend runner), the models and
 * the widgets, and wires the views to the session's staged signals. All loading happens on the
 * runner's threads; this window only reacts.
 */
class MainWindow : public QMainWindow, public WindowServices
{
    Q_OBJECT

public:
    explicit MainWindow(QWidget *parent = nullptr);
    ~MainWindow() override;

    model::CheckpointSession *session() const { return m_session; }
    /** Opens a checkpoint directory or file (asynchronously); remembered as a recent file. */
    void openPath(const QString &path);
    /** What the checkpoint is diffed against: a layout JSON, or one generated from a config
     *  (Hugging Face config.json, Megatron arguments, a checkpoint's saved args). */
    void setLayoutPath(const QString &path);
    void setConfigPath(const QString &path, const shardscope::LayoutOptions &options = {});
    /** The diff's rules, strictness and partial load (the diff panel's controls). */
    void setDiffOptions(const shardscope::DiffOptions &options);
    /** A second checkpoint to compare the open one with. */
    void setComparePath(const QString &path) override;
    /** Window geometry, splitters and the tree's columns from the last run (QSettings). */
    void restoreSettings();
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
    void compareValues() override;
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
    void onOpenFailed(const QString &error);
    void onProgress(int permille, const QString &message);
    void onJobProgress(const QString &stage, int permille, double etaSeconds);
    void onJobEnded(bool ok, const QString &message);
    void onCurrentItemChanged(const QModelIndex &current);
    void onTensorDetails(const QString &key, const model::TensorDetails &details);
    void onProblemActivated(const QString &key);
    void updateStatusBar();
    void runDiffWhenReady();
    void onDiffChanged(const model::DiffSnapshot &diff);
    void updateLoadMarks() override;
    void updateShardMap();
    void refilter(const std::function<void()> &apply);
    /** Matches a filter expands in full; more open the first levels only. */
    static constexpr quint64 MaxExpandedMatches = 5000;
    void selectStoredKey(const QString &key) override;
    void rebuildRecentMenu();
    bool comparing() const;
    QString reportLayoutPath(const QString &reportPath) const;
    void showError(const QString &title, const QString &message) override;

    model::CheckpointSession *m_session = nullptr;
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

    QLabel *m_formatLabel = nullptr;
    QLabel *m_countsLabel = nullptr;
    QLabel *m_problemsLabel = nullptr;
    QProgressBar *m_progress = nullptr;
    QProgressBar *m_jobProgress = nullptr;
    QLabel *m_jobLabel = nullptr;
    QToolButton *m_cancelJob = nullptr;

    QLabel *m_diffLabel = nullptr;
    QMenu *m_recentMenu = nullptr;
    bool m_diffWanted = false;    ///< a layout is set: diff each checkpoint opened
    bool m_roomOnShow = false;    ///< makeRoomForPanel() asked before the window was shown
    bool m_configPending = false; ///< a layout is being generated from a config
    QString m_initialKey;
    QString m_initialFilter;
    QAction *m_flatAction = nullptr;
    bool m_selectFirstTensor = false;
};

} // namespace shardscope::gui
