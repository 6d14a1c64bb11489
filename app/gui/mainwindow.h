// SPDX-License-Identifier: MIT
#pragma once

#include "model/tensordetails.h"

#include <QMainWindow>

class QLabel;
class QProgressBar;
class QSplitter;

namespace shardscope::model {
class BackendRunner;
class CheckpointFilterProxy;
class CheckpointTreeModel;
class ProblemListModel;
} // namespace shardscope::model

namespace shardscope::widgets {
class CheckpointTreeView;
class FilterBar;
class ProblemsPanel;
class TensorDetailsPanel;
} // namespace shardscope::widgets

namespace shardscope::gui {

/**
 * The composition root: creates the backend runner, the models and the widgets, and wires
 * them. All loading happens on the runner's thread; this window only reacts to its signals.
 */
class MainWindow : public QMainWindow
{
    Q_OBJECT

public:
    explicit MainWindow(QWidget *parent = nullptr);
    ~MainWindow() override;

    /** Opens a checkpoint directory or file (asynchronously). */
    void openPath(const QString &path);
    /**
     * Screenshot mode: once the checkpoint is open, select the first tensor, wait for its
     * details, save the window to `file` (PNG) and quit (exit code 0, or 1 on failure).
     */
    void setScreenshotFile(const QString &file);
    /** The key to select once the next checkpoint is open (instead of none, or the first
     *  tensor in screenshot mode). */
    void setInitialSelection(const QString &key) { m_initialKey = key; }

protected:
    void dragEnterEvent(QDragEnterEvent *event) override;
    void dropEvent(QDropEvent *event) override;

private:
    void createActions();
    void openDirectoryDialog();
    void openFileDialog();
    void reload();
    void onCheckpointOpened(const model::IndexSnapshot &index);
    void onOpenFailed(const QString &error);
    void onProgress(int permille, const QString &message);
    void onCurrentItemChanged(const QModelIndex &current);
    void onTensorDetails(const QString &key, const model::TensorDetails &details);
    void onProblemActivated(const QString &key);
    void updateStatusBar();
    void takeScreenshot();

    model::BackendRunner *m_runner = nullptr;
    model::CheckpointTreeModel *m_treeModel = nullptr;
    model::CheckpointFilterProxy *m_proxy = nullptr;
    model::ProblemListModel *m_problemModel = nullptr;

    widgets::FilterBar *m_filterBar = nullptr;
    widgets::CheckpointTreeView *m_tree = nullptr;
    widgets::TensorDetailsPanel *m_details = nullptr;
    widgets::ProblemsPanel *m_problems = nullptr;
    QSplitter *m_hsplit = nullptr;
    QSplitter *m_vsplit = nullptr;

    QLabel *m_formatLabel = nullptr;
    QLabel *m_countsLabel = nullptr;
    QLabel *m_problemsLabel = nullptr;
    QProgressBar *m_progress = nullptr;

    QString m_path;
    QString m_initialKey;
    QString m_screenshotFile;
    bool m_screenshotPending = false;
};

} // namespace shardscope::gui
