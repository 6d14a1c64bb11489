// SPDX-License-Identifier: MIT
#pragma once

#include "model/snapshots.h"

#include <shardscope/remote.h>

#include <QWidget>

class QCheckBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QComboBox;
class QLineEdit;
class QTreeView;

namespace shardscope::model {
class VerifyTableModel;
} // namespace shardscope::model

namespace shardscope::widgets {

/**
 * The real load, checked bit for bit: the parallel configuration to load with (each size
 * defaults to the layout's), the memory budget and the threads; Run starts it on the session's
 * long lane and the panel shows its stage, progress, time left and a Cancel. The result is a
 * table, worst outcome first, that a filter narrows to the problems; selecting a row names the
 * parameter (the window selects it in the tree), and selectStoredKey() goes the other way.
 * For a checkpoint on another host a row more says where it runs: on that host's threads (in
 * its server) or as a job the server launches there (srun or torchrun, nodes, ranks, partition,
 * time limit, account: the CLI's `verify --launch` options).
 */
class VerifyPanel : public QWidget
{
    Q_OBJECT

public:
    explicit VerifyPanel(QWidget *parent = nullptr);

    /** The request the controls say (paths, rules and the opened index are the caller's). */
    shardscope::VerifyRequest request() const;
    void setReport(const model::VerifySnapshot &report, const model::DiffSnapshot &diff);
    /** Whether Run can start (a checkpoint and a layout are there). */
    void setReady(bool ready, const QString &why = {});
    /** Selects the row of the parameter that draws from `key`; false when none does. */
    bool selectStoredKey(const QString &key);
    model::VerifyTableModel *tableModel() const { return m_model; }

    /** Shows the launch row for a checkpoint on `host` (hidden when `host` is empty: a local
     *  checkpoint verifies in this process); `srun`/`torchrun`: what the server found on its
     *  PATH (a launcher it lacks is offered with a tooltip that says so). */
    void setRemoteHost(const QString &host, bool srun, bool torchrun);
    /** How verify runs on the remote host (Launcher::None: in the server's process). */
    shardscope::RemoteLaunch launch() const;
    void setLaunch(const shardscope::RemoteLaunch &launch);

public Q_SLOTS:
    /** Asks for a run with what the controls say (runRequested), as the Run button does. */
    void run();
    void jobStarted();
    void jobProgress(const QString &stage, int permille, double etaSeconds);
    void jobEnded(bool ok, const QString &message);

Q_SIGNALS:
    void runRequested(const shardscope::VerifyRequest &request);
    void cancelRequested();
    /** The launch row changed (a remote checkpoint only). */
    void launchChanged(const shardscope::RemoteLaunch &launch);
    /** A row was selected: the parameter, and the stored key it draws from first. */
    void parameterSelected(const QString &name, const QString &storedKey);

private:
    void updateSummary();
    void updateLaunchControls();

    model::VerifyTableModel *m_model;
    QSortFilterProxyModel *m_proxy;
    QSpinBox *m_tp, *m_pp, *m_ep, *m_etp, *m_dp, *m_first, *m_last, *m_memory, *m_threads;
    QCheckBox *m_hash;
    QPushButton *m_run, *m_cancel;
    QProgressBar *m_progress;
    QLabel *m_stage, *m_summary;
    QComboBox *m_show;
    QTreeView *m_view;
    QWidget *m_launchRow;
    QComboBox *m_launcher, *m_collectives;
    QSpinBox *m_nodes, *m_ranks;
    QLineEdit *m_partition, *m_time, *m_account;
    bool m_remote = false, m_hasSrun = false, m_hasTorchrun = false;
    model::DiffSnapshot m_diff;
    bool m_running = false;
};

} // namespace shardscope::widgets
