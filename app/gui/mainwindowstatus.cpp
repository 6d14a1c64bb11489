// SPDX-License-Identifier: MIT
// The status bar: the open's progress, a long job's stage, time left and Cancel, and what the
// checkpoint holds.
#include "mainwindow.h"

#include "model/checkpointsession.h"
#include "model/formatting.h"
#include "widgets/elidedlabel.h"
#include "widgets/statusstyle.h"

#include <shardscope/checkpoint.h>
#include <shardscope/torchcompat.h>

#include <QFileInfo>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QStatusBar>
#include <QTimer>
#include <QToolButton>

using namespace shardscope::model;
using namespace shardscope::widgets;

namespace shardscope::gui {

namespace {

QString formatDisplayName(Format f)
{
    switch (f) {
    case Format::Dcp:
        return QStringLiteral("PyTorch DCP");
    case Format::MegatronTorchDist:
        return QStringLiteral("Megatron torch_dist");
    case Format::MegatronFsdpDtensor:
        return QStringLiteral("Megatron-FSDP fsdp_dtensor");
    case Format::MegatronLegacy:
        return QStringLiteral("Megatron legacy (mp_rank)");
    case Format::TorchSave:
        return QStringLiteral("torch.save");
    case Format::Safetensors:
        return QStringLiteral("safetensors");
    case Format::SafetensorsIndex:
        return QStringLiteral("safetensors (sharded)");
    case Format::TorchSaveIndex:
        return QStringLiteral("torch.save (sharded)");
    }
    return QString::fromStdString(std::string(formatName(f)));
}

} // namespace

void MainWindow::onJobStarted(const JobInfo &job)
{
    m_shownJob = job;
    m_jobLabel->setText(job.title);
    m_jobLabel->setToolTip(job.title);
    onJobProgress(job, {}, -1, -1);
}

void MainWindow::onJobProgress(const JobInfo &job, const QString &stage, int permille,
                               double etaSeconds)
{
    if (job.id != m_shownJob.id)
        return; // the status bar follows the newest job
    // The stage beside the title; the share done and the time left on the bar.
    const QString line = showJobProgress(m_jobProgress, stage, permille, etaSeconds);
    m_jobLabel->setText(stage.isEmpty() ? job.title : tr("%1: %2").arg(job.title, stage));
    m_jobLabel->setToolTip(line.isEmpty() ? job.title : tr("%1: %2").arg(job.title, line));
    m_jobProgress->setToolTip(m_jobLabel->toolTip());
    for (QWidget *w : {static_cast<QWidget *>(m_jobLabel), static_cast<QWidget *>(m_jobProgress),
                       static_cast<QWidget *>(m_cancelJob)})
        w->show();
}

void MainWindow::onJobEnded(const JobInfo &job, bool ok, const QString &message)
{
    if (!ok && !m_session->connected())
        offerReconnect(message);
    const std::vector<JobInfo> running = m_session->jobs();
    if (running.empty()) {
        m_shownJob = {};
        for (QWidget *w :
             {static_cast<QWidget *>(m_jobLabel), static_cast<QWidget *>(m_jobProgress),
              static_cast<QWidget *>(m_cancelJob)})
            w->hide();
    } else if (job.id == m_shownJob.id) { // another job still runs: its progress in sight
        onJobStarted(running.back());
    }
    switch (job.kind) {
    case JobKind::Open:
    case JobKind::OpenCompare:
        return; // opened or openFailed says how it went
    case JobKind::Layout:
    case JobKind::Export:
    case JobKind::Repair:
        if (!ok && message != jobCancelledText()) {
            showError(job.title, message);
            return;
        }
        break;
    default:
        break;
    }
    // A job that ended well does not cover a message still being shown; one that failed does.
    if (ok && m_messageTimer->isActive())
        return;
    say(ok ? tr("%1: done").arg(job.title) : tr("%1: %2").arg(job.title, message), 6000);
}

// The connection to the checkpoint's host is gone: what is shown stays, and a button in the
// status bar connects again (and opens the checkpoint again).
void MainWindow::offerReconnect(const QString &message)
{
    auto *button = statusBar()->findChild<QPushButton *>(QStringLiteral("reconnect"));
    if (!button) {
        button = new QPushButton(statusBar());
        button->setObjectName(QStringLiteral("reconnect"));
        statusBar()->addPermanentWidget(button);
        connect(button, &QPushButton::clicked, this, [this, button] {
            button->setEnabled(false);
            m_session->reconnect();
        });
        connect(m_session, &CheckpointSession::reconnected, button, &QWidget::hide);
        connect(m_session, &CheckpointSession::jobEnded, button,
                [this, button](const JobInfo &, bool, const QString &) {
                    button->setEnabled(true);
                    button->setVisible(!m_session->connected());
                });
    }
    button->setText(tr("Reconnect to %1").arg(m_session->location()));
    button->setToolTip(message);
    button->show();
}

void MainWindow::updateTitle()
{
    const QString path = m_session->path();
    if (path.isEmpty()) {
        setWindowTitle(QStringLiteral("ShardScope"));
        return;
    }
    QString name = path;
    while (name.size() > 1 && name.endsWith(QLatin1Char('/')))
        name.chop(1);
    name = QFileInfo(name).fileName();
    const QString where = m_session->location();
    setWindowTitle(where.isEmpty() ? tr("%1 — ShardScope").arg(name)
                                   : tr("%1 on %2 — ShardScope").arg(name, where));
}

void MainWindow::say(const QString &text, int timeoutMs)
{
    m_messageLabel->setText(text);
    m_messageLabel->setToolTip(text.size() > 80 ? text : QString());
    if (timeoutMs > 0)
        m_messageTimer->start(timeoutMs);
    else
        m_messageTimer->stop();
}

void MainWindow::updateStatusBar()
{
    const IndexSnapshot &index = m_treeModel->checkpointIndex();
    if (!index) {
        m_formatLabel->setText(tr("No checkpoint open"));
        m_formatLabel->setToolTip({});
        m_problemsLabel->setText({});
        return;
    }
    uint64_t bytes = 0;
    for (const TensorEntry &t : index->tensors)
        bytes += t.nbytes();
    const QString format = formatDisplayName(index->format);
    const QString where = m_session->location(); // a remote checkpoint says where it lives
    m_formatLabel->setText(
        (where.isEmpty() ? QString() : tr("on %1 · ").arg(where)) +
        tr("%1 · %2 · %3")
            .arg(format, countOf(index->tensors.size(), "tensor", "tensors"), formatBytes(bytes)));
    m_formatLabel->setToolTip(tr("Format: %1\n%2 · %3 · %4 · %5 in %6")
                                  .arg(format, countOf(index->tensors.size(), "tensor", "tensors"),
                                       countOf(index->objects.size(), "object", "objects"),
                                       countOf(index->chunkCount(), "chunk", "chunks"),
                                       formatBytes(bytes),
                                       countOf(index->files.size(), "file", "files")));
    // Which torch reads its metadata: always in the tooltip; on the bar only when some checked
    // release cannot (a laptop's status bar has no room for "torch 2.4 and later" every time).
    const TorchReadability torch = torchReadability(*index);
    if (torch.applies) {
        if (!torch.limits.empty())
            m_formatLabel->setText(m_formatLabel->text() +
                                   tr(" · read by %1").arg(QString::fromStdString(torch.text())));
        m_formatLabel->setToolTip(m_formatLabel->toolTip() + tr("\nRead by ") +
                                  QString::fromStdString(torch.explained()));
    }
    // Reading problems, named apart from the load's (the Load column, the load diff).
    const size_t n = index->problems.size();
    m_problemsLabel->setText(n == 0 ? tr("Reading: no problems")
                                    : tr("Reading: %1").arg(countOf(n, "problem", "problems")));
    m_problemsLabel->setToolTip(tr("What reading the checkpoint found (the tree's Reading column, "
                                   "the Problems tab); the load's own problems lead the status "
                                   "bar once there is a layout"));
    m_problemsLabel->setColor(n == 0 ? QColor()
                                     : widgets::attentionColor(widgets::Attention::Bad, palette()));
}

} // namespace shardscope::gui
