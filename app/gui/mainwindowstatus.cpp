// SPDX-License-Identifier: MIT
// The status bar: the open's progress, a long job's stage, time left and Cancel, and what the
// checkpoint holds.
#include "mainwindow.h"

#include "model/checkpointsession.h"
#include "model/formatting.h"
#include "widgets/statusstyle.h"

#include <shardscope/checkpoint.h>
#include <shardscope/torchcompat.h>

#include <QLabel>
#include <QProgressBar>
#include <QStatusBar>
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

void MainWindow::onProgress(int permille, const QString &message)
{
    if (permille >= 1000) {
        m_progress->hide();
        statusBar()->showMessage(message, 4000);
        return;
    }
    if (permille < 0) {
        m_progress->setRange(0, 0);
    } else {
        m_progress->setRange(0, 1000);
        m_progress->setValue(permille);
    }
    m_progress->show();
    statusBar()->showMessage(message);
}

void MainWindow::onJobProgress(const QString &stage, int permille, double etaSeconds)
{
    m_jobProgress->setToolTip(showJobProgress(m_jobProgress, stage, permille, etaSeconds));
    for (QWidget *w : {static_cast<QWidget *>(m_jobLabel), static_cast<QWidget *>(m_jobProgress),
                       static_cast<QWidget *>(m_cancelJob)})
        w->show();
}

void MainWindow::onJobEnded(bool ok, const QString &message)
{
    if (!m_session->isJobRunning()) // another job still runs: its progress stays in sight
        for (QWidget *w :
             {static_cast<QWidget *>(m_jobLabel), static_cast<QWidget *>(m_jobProgress),
              static_cast<QWidget *>(m_cancelJob)})
            w->hide();
    statusBar()->showMessage(ok ? tr("%1: done").arg(m_jobLabel->text())
                                : tr("%1: %2").arg(m_jobLabel->text(), message),
                             6000);
}

void MainWindow::updateStatusBar()
{
    const IndexSnapshot &index = m_treeModel->checkpointIndex();
    if (!index) {
        m_formatLabel->setText(tr("No checkpoint open"));
        m_countsLabel->clear();
        m_problemsLabel->clear();
        return;
    }
    uint64_t bytes = 0;
    for (const TensorEntry &t : index->tensors)
        bytes += t.nbytes();
    m_formatLabel->setText(tr("Format: %1").arg(formatDisplayName(index->format)));
    const TorchReadability torch = torchReadability(*index); // which torch reads its metadata
    m_formatLabel->setToolTip(QString::fromStdString(torch.explained()));
    if (torch.applies)
        m_formatLabel->setText(m_formatLabel->text() +
                               tr(" · read by %1").arg(QString::fromStdString(torch.text())));
    m_countsLabel->setText(tr("%1 tensors  ·  %2 objects  ·  %3 chunks  ·  %4 in %5 files")
                               .arg(formatCount(index->tensors.size()),
                                    formatCount(index->objects.size()),
                                    formatCount(index->chunkCount()), formatBytes(bytes),
                                    formatCount(index->files.size())));
    const size_t n = index->problems.size();
    m_problemsLabel->setText(n == 0 ? tr("No problems") : tr("%1 problems").arg(n));
    m_problemsLabel->setStyleSheet(
        n == 0 ? QString()
               : QStringLiteral("color: %1;")
                     .arg(widgets::attentionColor(widgets::Attention::Bad, palette()).name()));
}

} // namespace shardscope::gui
