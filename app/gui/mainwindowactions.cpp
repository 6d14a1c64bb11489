// SPDX-License-Identifier: MIT
// The window's menus and their shortcuts: every action a panel offers is reachable from here.
#include "mainwindow.h"
#include "panelbinders.h"
#include "remoteconnect.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointsession.h"
#include "model/roles.h"
#include "widgets/checkpointtreeview.h"
#include "widgets/diffpanel.h"
#include "widgets/filterbar.h"
#include "widgets/layoutoptionsdialog.h"

#include <QApplication>
#include <QClipboard>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>

#include <utility>

using namespace shardscope::model;
using namespace shardscope::widgets;

namespace shardscope::gui {

void MainWindow::createActions()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    QAction *openDir = file->addAction(tr("Open &Directory…"));
    openDir->setShortcut(QKeySequence::Open);
    connect(openDir, &QAction::triggered, this, &MainWindow::openDirectoryDialog);
    QAction *openFile = file->addAction(tr("Open &File…"));
    openFile->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    connect(openFile, &QAction::triggered, this, &MainWindow::openFileDialog);
    QAction *openRemote = file->addAction(tr("Open Re&mote…"));
    openRemote->setToolTip(tr("A checkpoint on another host, through ssh"));
    openRemote->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_H)); // a host
    connect(openRemote, &QAction::triggered, this, [this] { openRemoteDialog(this); });
    QAction *reloadAction = file->addAction(tr("&Reload"));
    reloadAction->setShortcut(QKeySequence::Refresh);
    connect(reloadAction, &QAction::triggered, this, &MainWindow::reload);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
    file->addSeparator();
    QAction *layout = file->addAction(tr("Check Against &Layout…"));
    layout->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_L));
    connect(layout, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Layout"), QFileInfo(m_session->path()).absolutePath(),
            tr("Layouts (*.json);;All files (*)"));
        if (!path.isEmpty())
            setLayoutPath(path);
    });
    QAction *config = file->addAction(tr("Check Against Model &Config…"));
    config->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_M));
    connect(config, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Model config: config.json, Megatron arguments"),
            QFileInfo(m_session->path()).absolutePath(), tr("All files (*)"));
        if (path.isEmpty())
            return;
        // The options `layout --from-config` takes, starting from the last ones used.
        LayoutOptionsDialog dialog(path, this);
        dialog.setOptions(m_session->layoutOptions());
        if (dialog.exec() == QDialog::Accepted)
            setConfigPath(path, dialog.options());
    });
    QAction *compare = file->addAction(tr("Compare &With…"));
    compare->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_K));
    connect(compare, &QAction::triggered, this, [this] { chooseCompare(m_session, *this); });
    file->addSeparator();
    QAction *exportAction = file->addAction(tr("&Export Report…"));
    exportAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    connect(exportAction, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export Report"), outputFolder() + QStringLiteral("/shardscope-report.md"),
            tr("Markdown (*.md);;HTML (*.html);;JSON (*.json)"));
        if (path.isEmpty())
            return;
        rememberOutputFolder(path);
        exportReport(path);
    });
    QAction *repair = file->addAction(tr("Save &Repaired Checkpoint…"));
    repair->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
    connect(repair, &QAction::triggered, this, [this] {
        if (m_session->path().isEmpty() || m_session->layoutPath().isEmpty()) {
            showError(tr("Save repaired checkpoint"),
                      tr("Check the checkpoint against a layout or a model config first: the "
                         "repair writes what that load asks for."));
            return;
        }
        QString name = m_session->path();
        while (name.size() > 1 && name.endsWith(QLatin1Char('/')))
            name.chop(1);
        const QString out =
            QFileDialog::getSaveFileName(this, tr("Save Repaired Checkpoint (a new directory)"),
                                         outputFolder() + QLatin1Char('/') +
                                             QFileInfo(name).fileName() + QStringLiteral("-fixed"),
                                         QString(), nullptr, QFileDialog::ShowDirsOnly);
        if (out.isEmpty())
            return;
        rememberOutputFolder(out);
        saveRepaired(out);
    });
    file->addSeparator();
    QAction *quit = file->addAction(tr("&Quit"));
    quit->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Q)); // QKeySequence::Quit: none on some
    connect(quit, &QAction::triggered, this, &QWidget::close);

    QMenu *edit = menuBar()->addMenu(tr("&Edit"));
    QAction *copyKey = edit->addAction(tr("Copy &Key"));
    copyKey->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_K));
    connect(copyKey, &QAction::triggered, this, [this] {
        const QString key = m_tree->currentIndex().data(KeyRole).toString();
        if (!key.isEmpty())
            QApplication::clipboard()->setText(key);
    });
    QAction *copyFix = edit->addAction(tr("Copy &Fix"));
    copyFix->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_F));
    connect(copyFix, &QAction::triggered, this, [this] {
        const QString fix = m_diffPanel->currentFix();
        if (fix.isEmpty())
            say(tr("Select a parameter with a fix in the load diff"), 4000);
        else
            QApplication::clipboard()->setText(fix);
    });
    QAction *copyRepro = edit->addAction(tr("Copy &Reproduce Command"));
    copyRepro->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    connect(copyRepro, &QAction::triggered, this, [this] {
        const QString command = reproCommand();
        if (command.isEmpty()) {
            say(tr("Nothing to reproduce yet"), 4000);
            return;
        }
        QApplication::clipboard()->setText(command);
        say(tr("Copied: %1").arg(command), 6000);
    });

    QMenu *tools = menuBar()->addMenu(tr("&Tools"));
    QAction *runDiff = tools->addAction(tr("Run Load &Diff"));
    runDiff->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
    connect(runDiff, &QAction::triggered, this, [this] {
        m_diffWanted = true;
        runDiffWhenReady();
        showPanel(QStringLiteral("diff"));
    });
    QAction *verify = tools->addAction(tr("&Verify Load"));
    verify->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    connect(verify, &QAction::triggered, this, &MainWindow::verifyLoad);
    QAction *values = tools->addAction(tr("Compare &Values"));
    values->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_V));
    connect(values, &QAction::triggered, this, &MainWindow::compareValues);
    QAction *layers = tools->addAction(tr("Plot &Family Across Layers"));
    layers->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
    connect(layers, &QAction::triggered, this, &MainWindow::plotLayers);
    QAction *cancel = tools->addAction(tr("&Cancel Job"));
    cancel->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_Escape));
    connect(cancel, &QAction::triggered, m_session, &CheckpointSession::cancel);
    tools->addSeparator();
    QAction *next = tools->addAction(tr("&Next Problem"));
    next->setShortcut(QKeySequence(Qt::Key_F8));
    connect(next, &QAction::triggered, this, [this] {
        showPanel(QStringLiteral("diff"));
        m_diffPanel->gotoProblem(true);
    });
    QAction *previous = tools->addAction(tr("&Previous Problem"));
    previous->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F8));
    connect(previous, &QAction::triggered, this, [this] {
        showPanel(QStringLiteral("diff"));
        m_diffPanel->gotoProblem(false);
    });

    QMenu *view = menuBar()->addMenu(tr("&View"));
    const std::pair<const char *, const char *> panels[] = {{"problems", "Show &Problems"},
                                                            {"diff", "Show Load &Diff"},
                                                            {"verify", "Show &Verification"},
                                                            {"compare", "Show &Comparison"}};
    int digit = 1;
    for (const auto &[name, title] : panels) {
        QAction *show = view->addAction(tr(title));
        show->setShortcut(QKeySequence(Qt::ALT | Qt::Key(Qt::Key_0 + digit++)));
        const QString panel = QString::fromLatin1(name);
        connect(show, &QAction::triggered, this, [this, panel] { showPanel(panel); });
    }
    view->addSeparator();
    QAction *find = view->addAction(tr("&Filter Keys"));
    find->setShortcut(QKeySequence::Find);
    connect(find, &QAction::triggered, this, [this] {
        m_filterBar->lineEdit()->setFocus();
        m_filterBar->lineEdit()->selectAll();
    });
    QAction *clearFilter = view->addAction(tr("&Clear Filters"));
    clearFilter->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_X));
    connect(clearFilter, &QAction::triggered, m_filterBar, &FilterBar::reset);
    view->addSeparator();
    // Full keys as a flat list: a match deep in Megatron's nesting reads in full.
    QAction *flat = m_flatAction = view->addAction(tr("&Flat List of Full Keys"));
    flat->setCheckable(true);
    flat->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
    connect(flat, &QAction::toggled, this, [this](bool on) {
        const QString key = detailsKey();
        m_treeModel->setFlat(on);
        if (const QModelIndex at = m_proxy->mapFromSource(m_treeModel->indexForKey(key));
            at.isValid())
            m_tree->selectIndex(at);
        if (!on && m_proxy->isFiltering())
            refilter([] {});
    });
    QAction *expand = view->addAction(tr("&Expand All"));
    expand->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Down));
    connect(expand, &QAction::triggered, m_tree, &QTreeView::expandAll);
    QAction *collapse = view->addAction(tr("C&ollapse All"));
    collapse->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Up));
    connect(collapse, &QAction::triggered, m_tree, &QTreeView::collapseAll);

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    QAction *about = help->addAction(tr("&About ShardScope"));
    about->setShortcut(QKeySequence::HelpContents);
    connect(about, &QAction::triggered, this, [this] {
        QMessageBox::about(
            this, tr("About ShardScope"),
            tr("<b>ShardScope %1</b><p>Inspector for large-model training checkpoints: "
               "PyTorch DCP, Megatron, torch.save and safetensors.</p>")
                .arg(QApplication::applicationVersion()));
    });
}

// Where a report or repair is written: the folder used last, else the user's documents (never
// the checkpoint's parent, which for the demo is the application's own resources).
QString MainWindow::outputFolder() const
{
    const QString last = QSettings().value(QStringLiteral("outputFolder")).toString();
    if (!last.isEmpty() && QFileInfo(last).isDir() && QFileInfo(last).isWritable())
        return last;
    const QString documents = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    return QFileInfo(documents).isDir() ? documents : QDir::homePath();
}

void MainWindow::rememberOutputFolder(const QString &written)
{
    QString p = written;
    while (p.size() > 1 && p.endsWith(QLatin1Char('/')))
        p.chop(1);
    QSettings().setValue(QStringLiteral("outputFolder"), QFileInfo(p).absolutePath());
}

} // namespace shardscope::gui
