// SPDX-License-Identifier: MIT
#include "mainwindow.h"
#include "steptimer.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "model/diffchoices.h"
#include "model/formatting.h"
#include "model/layerfamily.h"
#include "model/loadmarks.h"
#include "model/problemlistmodel.h"
#include "model/reprocommand.h"
#include "model/roles.h"
#include "model/shardmap.h"
#include "widgets/checkpointtreeview.h"
#include "widgets/comparepanel.h"
#include "widgets/diffpanel.h"
#include "widgets/filterbar.h"
#include "widgets/layerplot.h"
#include "widgets/layoutoptionsdialog.h"
#include "widgets/problemspanel.h"
#include "widgets/shardmapplot.h"
#include "widgets/statusstyle.h"
#include "widgets/tensordetailspanel.h"
#include "widgets/verifypanel.h"

#include <shardscope/checkpoint.h>
#include <shardscope/writefile.h>

#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include <cstdio>
#include <utility>

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

MainWindow::MainWindow(QWidget *parent)
    : QMainWindow(parent)
    , m_session(new CheckpointSession(this))
    , m_treeModel(new CheckpointTreeModel(this))
    , m_proxy(new CheckpointFilterProxy(this))
    , m_problemModel(new ProblemListModel(this))
{
    setWindowTitle(QStringLiteral("ShardScope"));
    setAcceptDrops(true);
    m_proxy->setSourceModel(m_treeModel);

    // Left: filter bar over the tree. Right: details. Bottom: problems.
    auto *left = new QWidget(this);
    auto *leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(4, 4, 0, 0);
    leftLayout->setSpacing(4);
    m_filterBar = new FilterBar(left);
    m_tree = new CheckpointTreeView(left);
    m_tree->setModel(m_proxy);
    leftLayout->addWidget(m_filterBar);
    leftLayout->addWidget(m_tree, 1);

    m_details = new TensorDetailsPanel(this);
    m_problems = new ProblemsPanel(this);
    m_problems->setModel(m_problemModel);

    // Right: the selected entry's details, its shard map, and its family across layers.
    m_shardMap = new ShardMapPlot(this);
    m_layerPlot = new LayerPlot(this);
    m_rightTabs = new QTabWidget(this);
    m_rightTabs->setDocumentMode(true);
    m_rightTabs->addTab(m_details, tr("Details"));
    m_rightTabs->addTab(m_shardMap, tr("Shard map"));
    m_rightTabs->addTab(m_layerPlot, tr("Layers"));

    m_hsplit = new QSplitter(Qt::Horizontal, this);
    m_hsplit->addWidget(left);
    m_hsplit->addWidget(m_rightTabs);
    m_hsplit->setStretchFactor(0, 3);
    m_hsplit->setStretchFactor(1, 2);
    m_hsplit->setChildrenCollapsible(false);

    // Bottom: the problems the reader found, and the load diff once there is a layout.
    m_diffPanel = new DiffPanel(this);
    m_bottomTabs = new QTabWidget(this);
    m_bottomTabs->setDocumentMode(true);
    m_bottomTabs->addTab(m_problems, tr("Problems"));
    m_bottomTabs->addTab(m_diffPanel, tr("Load diff"));
    m_verifyPanel = new VerifyPanel(this);
    m_bottomTabs->addTab(m_verifyPanel, tr("Verify"));
    m_comparePanel = new ComparePanel(this);
    m_bottomTabs->addTab(m_comparePanel, tr("Compare"));

    m_vsplit = new QSplitter(Qt::Vertical, this);
    m_vsplit->addWidget(m_hsplit);
    m_vsplit->addWidget(m_bottomTabs);
    m_vsplit->setStretchFactor(0, 5);
    m_vsplit->setStretchFactor(1, 1);
    m_vsplit->setChildrenCollapsible(false);
    setCentralWidget(m_vsplit);
    m_hsplit->setSizes({820, 620});
    m_vsplit->setSizes({740, 130});

    // Status bar: messages on the left; format, counts, problems and progress on the right.
    m_formatLabel = new QLabel(this);
    m_countsLabel = new QLabel(this);
    m_problemsLabel = new QLabel(this);
    m_progress = new QProgressBar(this);
    m_progress->setMaximumWidth(180);
    m_progress->setMaximumHeight(16);
    m_progress->setTextVisible(false);
    m_progress->hide();
    m_diffLabel = new QLabel(this);
    m_diffLabel->hide();
    for (QLabel *label : {m_formatLabel, m_countsLabel, m_problemsLabel, m_diffLabel})
        label->setContentsMargins(10, 0, 10, 0);
    statusBar()->addPermanentWidget(m_diffLabel);
    statusBar()->addPermanentWidget(m_formatLabel);
    statusBar()->addPermanentWidget(m_countsLabel);
    statusBar()->addPermanentWidget(m_problemsLabel);
    statusBar()->addPermanentWidget(m_progress);
    // A long job (diff, verify, compare): its stage, progress with the time left, and a cancel.
    m_jobLabel = new QLabel(this);
    m_jobProgress = new QProgressBar(this);
    m_jobProgress->setMaximumWidth(160);
    m_jobProgress->setMaximumHeight(16);
    m_cancelJob = new QToolButton(this);
    m_cancelJob->setText(tr("Cancel"));
    m_cancelJob->setAutoRaise(true);
    connect(m_cancelJob, &QToolButton::clicked, m_session, &CheckpointSession::cancel);
    for (QWidget *w : {static_cast<QWidget *>(m_jobLabel), static_cast<QWidget *>(m_jobProgress),
                       static_cast<QWidget *>(m_cancelJob)}) {
        statusBar()->addPermanentWidget(w);
        w->hide();
    }
    statusBar()->setSizeGripEnabled(false);

    createActions();

    connect(m_filterBar, &FilterBar::textChanged, this, [this](const QString &text) {
        refilter([this, text] { m_proxy->setFilterText(text); });
    });
    // The problems list follows the filter text: what the tree shows, the list shows.
    connect(m_filterBar, &FilterBar::textChanged, m_problemModel, &ProblemListModel::setKeyFilter);
    connect(m_filterBar, &FilterBar::dtypeChanged, this, [this](const QString &dtype) {
        refilter([this, dtype] { m_proxy->setDTypeFilter(dtype); });
    });
    connect(m_filterBar, &FilterBar::problemsOnlyChanged, this,
            [this](bool on) { refilter([this, on] { m_proxy->setProblemsOnly(on); }); });

    connect(m_tree, &CheckpointTreeView::currentItemChanged, this,
            &MainWindow::onCurrentItemChanged);
    connect(m_problems, &ProblemsPanel::problemActivated, this, &MainWindow::onProblemActivated);

    connect(m_session, &CheckpointSession::opening, this, [this](const QString &path) {
        setWindowTitle(tr("%1 — ShardScope").arg(QFileInfo(path).fileName()));
    });
    connect(m_session, &CheckpointSession::keysKnown, this, &MainWindow::onKeysKnown);
    connect(m_session, &CheckpointSession::opened, this, &MainWindow::onCheckpointOpened);
    connect(m_session, &CheckpointSession::layoutChanged, this, [this] {
        m_diffWanted = true;
        m_configPending = false;
        runDiffWhenReady();
    });
    connect(m_session, &CheckpointSession::diffChanged, this, &MainWindow::onDiffChanged);
    connect(m_diffPanel, &DiffPanel::optionsChanged, m_session, [this](const DiffOptions &options) {
        if (m_session->index() && !m_session->layoutPath().isEmpty())
            m_session->runDiff(options);
    });
    connect(m_filterBar, &FilterBar::textChanged, m_diffPanel, &DiffPanel::setFilterText);
    // A selected parameter shows in the tree where it is stored (its first stored key).
    connect(m_diffPanel, &DiffPanel::entrySelected, this,
            [this](const QString &, const QString &storedKey) { selectStoredKey(storedKey); });
    connect(m_verifyPanel, &VerifyPanel::parameterSelected, this,
            [this](const QString &, const QString &storedKey) { selectStoredKey(storedKey); });
    // The verification loads with the rules the diff shows (a rule switched off stays off).
    connect(m_verifyPanel, &VerifyPanel::runRequested, this, [this](VerifyRequest request) {
        request.disabledRules = m_diffPanel->options().disabledRules;
        m_session->runVerify(std::move(request));
    });
    connect(m_verifyPanel, &VerifyPanel::cancelRequested, m_session, &CheckpointSession::cancel);
    // Compare: the structure as soon as the second checkpoint is open; values when asked.
    connect(m_comparePanel, &ComparePanel::chooseRequested, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(
            this, tr("Checkpoint to compare with"), QFileInfo(m_session->path()).absolutePath());
        if (!dir.isEmpty())
            setComparePath(dir);
    });
    connect(m_comparePanel, &ComparePanel::valuesRequested, this, [this] { compareValues(); });
    connect(m_comparePanel, &ComparePanel::keySelected, this, &MainWindow::selectStoredKey);
    connect(m_session, &CheckpointSession::compareOpened, this, [this] {
        m_comparePanel->setComparePath(m_session->comparePath());
        if (m_session->index())
            m_session->runCompare(m_diffPanel->options());
        showPanel(QStringLiteral("compare"));
    });
    connect(m_layerPlot, &LayerPlot::plotRequested, m_session, &CheckpointSession::runLayerStats);
    connect(m_session, &CheckpointSession::layerStatsChanged, m_layerPlot, &LayerPlot::setStats);
    connect(m_layerPlot, &LayerPlot::keyActivated, this, &MainWindow::selectStoredKey);
    connect(m_session, &CheckpointSession::comparisonChanged, m_comparePanel,
            &ComparePanel::setComparison);
    connect(m_session, &CheckpointSession::valuesChanged, m_comparePanel, &ComparePanel::setValues);
    connect(m_session, &CheckpointSession::verificationChanged, this,
            [this](const VerifySnapshot &report) {
                m_verifyPanel->setReport(report, m_session->diff());
                updateLoadMarks();
                if (report && !report->result.clean())
                    showPanel(QStringLiteral("verify"));
            });
    connect(m_session, &CheckpointSession::openFailed, this, &MainWindow::onOpenFailed);
    connect(m_session, &CheckpointSession::reloaded, this,
            [this](const QString &summary) { statusBar()->showMessage(summary, 30000); });
    connect(m_session, &CheckpointSession::changedOnDisk, this, [this] {
        statusBar()->showMessage(
            tr("The checkpoint changed on disk: File ▸ Reload (F5) reads it again"));
    });
    connect(m_session, &CheckpointSession::jobStarted, this, [this](const QString &title) {
        m_jobLabel->setText(title);
        onJobProgress({}, -1, -1);
        if (m_session->jobKind() == CheckpointSession::JobKind::Verify)
            m_verifyPanel->jobStarted();
        if (m_session->jobKind() == CheckpointSession::JobKind::Values)
            m_comparePanel->jobStarted();
    });
    connect(m_session, &CheckpointSession::jobProgress, this, &MainWindow::onJobProgress);
    connect(m_session, &CheckpointSession::jobProgress, this,
            [this](const QString &stage, int permille, double eta) {
                if (m_session->jobKind() == CheckpointSession::JobKind::Verify)
                    m_verifyPanel->jobProgress(stage, permille, eta);
            });
    connect(m_session, &CheckpointSession::jobEnded, this, &MainWindow::onJobEnded);
    connect(m_session, &CheckpointSession::jobEnded, this, [this](bool ok, const QString &message) {
        switch (m_session->jobKind()) {
        case CheckpointSession::JobKind::Verify:
            m_verifyPanel->jobEnded(ok, message);
            break;
        case CheckpointSession::JobKind::Values:
            m_comparePanel->jobEnded(ok, message);
            break;
        case CheckpointSession::JobKind::Layout:
        case CheckpointSession::JobKind::Export:
        case CheckpointSession::JobKind::Repair:
            if (!ok && message != tr("Cancelled"))
                showError(m_jobLabel->text(), message);
            break;
        default:
            break;
        }
    });
    connect(m_session, &CheckpointSession::repaired, this, [this](const QString &summary) {
        statusBar()->showMessage(summary);
        if (!isVisible() || testAttribute(Qt::WA_DontShowOnScreen))
            return;
        auto *box = new QMessageBox(QMessageBox::Information, tr("Save repaired checkpoint"),
                                    summary, QMessageBox::Ok, this);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setModal(false);
        box->show();
    });
    BackendRunner *runner = m_session->runner();
    connect(runner, &BackendRunner::progress, this, &MainWindow::onProgress);
    connect(runner, &BackendRunner::tensorDetailsReady, this, &MainWindow::onTensorDetails);
    connect(runner, &BackendRunner::objectReady, m_details,
            [this](const QString &, const ObjectDetails &details) {
                m_details->setObjectDetails(details);
            });

    updateStatusBar();
}

MainWindow::~MainWindow() = default;

void MainWindow::setFlatList(bool on)
{
    m_flatAction->setChecked(on);
}

void MainWindow::createActions()
{
    QMenu *file = menuBar()->addMenu(tr("&File"));
    QAction *openDir = file->addAction(tr("Open &Directory…"));
    openDir->setShortcut(QKeySequence::Open);
    connect(openDir, &QAction::triggered, this, &MainWindow::openDirectoryDialog);
    QAction *openFile = file->addAction(tr("Open &File…"));
    openFile->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    connect(openFile, &QAction::triggered, this, &MainWindow::openFileDialog);
    QAction *reloadAction = file->addAction(tr("&Reload"));
    reloadAction->setShortcut(QKeySequence::Refresh);
    connect(reloadAction, &QAction::triggered, this, &MainWindow::reload);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
    file->addSeparator();
    QAction *layout = file->addAction(tr("Check Against &Layout…"));
    connect(layout, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Layout"), QFileInfo(m_session->path()).absolutePath(),
            tr("Layouts (*.json);;All files (*)"));
        if (!path.isEmpty())
            setLayoutPath(path);
    });
    QAction *config = file->addAction(tr("Check Against Model &Config…"));
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
    connect(compare, &QAction::triggered, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(
            this, tr("Checkpoint to compare with"), QFileInfo(m_session->path()).absolutePath());
        if (!dir.isEmpty())
            setComparePath(dir);
    });
    file->addSeparator();
    QAction *exportAction = file->addAction(tr("&Export Report…"));
    exportAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    connect(exportAction, &QAction::triggered, this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export Report"),
            QFileInfo(m_session->path()).absolutePath() + QStringLiteral("/shardscope-report.md"),
            tr("Markdown (*.md);;HTML (*.html);;JSON (*.json)"));
        if (!path.isEmpty())
            exportReport(path);
    });
    QAction *repair = file->addAction(tr("Save &Repaired Checkpoint…"));
    connect(repair, &QAction::triggered, this, [this] {
        if (m_session->path().isEmpty() || m_session->layoutPath().isEmpty()) {
            showError(tr("Save repaired checkpoint"),
                      tr("Check the checkpoint against a layout or a model config first: the "
                         "repair writes what that load asks for."));
            return;
        }
        QString suggested = m_session->path();
        while (suggested.endsWith(QLatin1Char('/')))
            suggested.chop(1);
        const QString out = QFileDialog::getSaveFileName(
            this, tr("Save Repaired Checkpoint (a new directory)"),
            suggested + QStringLiteral("-fixed"), QString(), nullptr, QFileDialog::ShowDirsOnly);
        if (!out.isEmpty())
            saveRepaired(out);
    });
    file->addSeparator();
    QAction *quit = file->addAction(tr("&Quit"));
    quit->setShortcut(QKeySequence::Quit);
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
            statusBar()->showMessage(tr("Select a parameter with a fix in the load diff"), 4000);
        else
            QApplication::clipboard()->setText(fix);
    });
    QAction *copyRepro = edit->addAction(tr("Copy &Reproduce Command"));
    copyRepro->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    connect(copyRepro, &QAction::triggered, this, [this] {
        const QString command = reproCommand();
        if (command.isEmpty()) {
            statusBar()->showMessage(tr("Nothing to reproduce yet"), 4000);
            return;
        }
        QApplication::clipboard()->setText(command);
        statusBar()->showMessage(tr("Copied: %1").arg(command), 6000);
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
    connect(expand, &QAction::triggered, m_tree, &QTreeView::expandAll);
    QAction *collapse = view->addAction(tr("C&ollapse All"));
    connect(collapse, &QAction::triggered, m_tree, &QTreeView::collapseAll);

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    QAction *about = help->addAction(tr("&About ShardScope"));
    connect(about, &QAction::triggered, this, [this] {
        QMessageBox::about(
            this, tr("About ShardScope"),
            tr("<b>ShardScope %1</b><p>Inspector for large-model training checkpoints: "
               "PyTorch DCP, Megatron, torch.save and safetensors.</p>")
                .arg(QApplication::applicationVersion()));
    });
}

void MainWindow::openDirectoryDialog()
{
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Open Checkpoint Directory"), QFileInfo(m_session->path()).absolutePath());
    if (!dir.isEmpty())
        openPath(dir);
}

void MainWindow::openFileDialog()
{
    const QString file = QFileDialog::getOpenFileName(
        this, tr("Open Checkpoint File"), QFileInfo(m_session->path()).absolutePath(),
        tr("Checkpoints (*.pt *.pth *.bin *.safetensors *.index.json .metadata *.metadata);;"
           "All files (*)"));
    if (!file.isEmpty())
        openPath(file);
}

void MainWindow::reload()
{
    m_session->reload();
}

void MainWindow::openPath(const QString &path)
{
    m_session->open(path);
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentFiles")).toStringList();
    const QString absolute = QFileInfo(path).absoluteFilePath();
    recent.removeAll(absolute);
    recent.prepend(absolute);
    while (recent.size() > 10)
        recent.removeLast();
    settings.setValue(QStringLiteral("recentFiles"), recent);
}

QStringList MainWindow::recentFiles()
{
    return QSettings().value(QStringLiteral("recentFiles")).toStringList();
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = recentFiles();
    if (recent.isEmpty())
        m_recentMenu->addAction(tr("(none yet)"))->setEnabled(false);
    for (const QString &path : recent)
        connect(m_recentMenu->addAction(path), &QAction::triggered, this,
                [this, path] { openPath(path); });
}

void MainWindow::setLayoutPath(const QString &path)
{
    m_session->setLayout(path);
}

void MainWindow::setConfigPath(const QString &path, const LayoutOptions &options)
{
    m_configPending = true;
    m_session->setConfig(path, options);
}

void MainWindow::setDiffOptions(const DiffOptions &options)
{
    m_diffPanel->setOptions(options);
}

void MainWindow::setComparePath(const QString &path)
{
    m_session->openCompare(path);
}

// Once both a checkpoint and a layout are there (in either order), the diff runs.
void MainWindow::runDiffWhenReady()
{
    if (m_diffWanted && m_session->index() && !m_session->layoutPath().isEmpty())
        m_session->runDiff(m_diffPanel->options());
}

// A filter change collapses the tree first (refiltering under thousands of expanded groups
// updates every one of their persistent indexes: minutes at DeepSeek-V3 scale), then opens
// what matched when there are few enough matches to read, else the first levels.
void MainWindow::refilter(const std::function<void()> &apply)
{
    const QString key = detailsKey();
    m_tree->collapseAll();
    apply();
    if (!m_proxy->isFiltering()) {
        m_tree->expandToDepth(0);
    } else {
        quint64 matched = 0;
        for (int r = 0; r < m_proxy->rowCount(); ++r)
            matched += m_proxy->index(r, 0).data(LeafCountRole).toULongLong();
        if (matched <= MaxExpandedMatches)
            m_tree->expandAll();
        else
            m_tree->expandToDepth(1);
    }
    // The selected entry stays in sight if the filter kept it.
    if (const QModelIndex at = m_proxy->mapFromSource(m_treeModel->indexForKey(key)); at.isValid())
        m_tree->scrollTo(at);
}

void MainWindow::selectStoredKey(const QString &key)
{
    const QModelIndex at = m_proxy->mapFromSource(m_treeModel->indexForKey(key));
    if (at.isValid())
        m_tree->selectIndex(at);
}

// The tree marks each stored key with what the load does with it: the diff's verdict, and the
// verification's once there is one.
void MainWindow::updateLoadMarks()
{
    StepTimer timer("load marks");
    const DiffSnapshot diff = m_session->diff();
    const VerifySnapshot verification = m_session->verification();
    auto marks = m_session->runner()->loadMarksFor(diff, verification);
    if (!marks) // a verification cleared, or a caller that ran no job: here, then
        marks = loadMarks(diff, verification, m_session->index());
    timer.step("computed");
    m_treeModel->setLoadMarks(std::move(marks));
    timer.step("tree model");
    m_tree->setColumnHidden(LoadColumn, diff == nullptr);
    updateShardMap();
    m_verifyPanel->setReady(diff != nullptr);
}

void MainWindow::updateShardMap()
{
    const IndexSnapshot index = m_session->index();
    const QString key = detailsKey();
    if (!index || key.isEmpty() ||
        NodeKind(m_tree->currentIndex().data(KindRole).toInt()) != NodeKind::Tensor) {
        m_shardMap->setMap({});
        return;
    }
    m_shardMap->setMap(
        model::shardMap(*index, key, m_session->diff().get(), m_session->verification().get()));
}

void MainWindow::onDiffChanged(const DiffSnapshot &diff)
{
    updateLoadMarks();
    if (!diff) {
        m_diffLabel->hide();
        m_diffPanel->setDiff(diff);
        return;
    }
    m_diffLabel->setText(loadSummary(*diff));
    m_diffLabel->setToolTip(QString::fromStdString(diff->outcome.message));
    const bool clean = diff->clean();
    m_diffLabel->setStyleSheet(
        clean ? QString()
              : QStringLiteral("color: %1;")
                    .arg(widgets::attentionColor(widgets::Attention::Bad, palette()).name()));
    m_diffLabel->show();
    StepTimer timer("diff");
    m_diffPanel->setDiff(diff);
    timer.step("diff panel");
    if (!clean) // something to read: the diff's tab, with room for it
        showPanel(QStringLiteral("diff"));
}

void MainWindow::showPanel(const QString &name)
{
    const std::pair<const char *, QWidget *> right[] = {
        {"details", m_details}, {"shards", m_shardMap}, {"layers", m_layerPlot}};
    for (const auto &[n, w] : right)
        if (name == QLatin1String(n)) {
            m_rightTabs->setCurrentWidget(w);
            return;
        }
    QWidget *panel = m_problems;
    if (name == QStringLiteral("diff"))
        panel = m_diffPanel;
    else if (name == QStringLiteral("verify"))
        panel = m_verifyPanel;
    else if (name == QStringLiteral("compare"))
        panel = m_comparePanel;
    m_bottomTabs->setCurrentWidget(panel);
    // A panel with tables needs room: at least two fifths of the height.
    const QList<int> sizes = m_vsplit->sizes();
    const int total = sizes.value(0) + sizes.value(1);
    if (panel != m_problems && sizes.value(1) < total * 2 / 5)
        m_vsplit->setSizes({total * 3 / 5, total * 2 / 5});
}

void MainWindow::showError(const QString &title, const QString &message)
{
    statusBar()->showMessage(tr("%1: %2").arg(title, message));
    if (!isVisible() || testAttribute(Qt::WA_DontShowOnScreen))
        return;
    // Never modal: the window stays usable while the message is read.
    auto *box = new QMessageBox(QMessageBox::Warning, title,
                                message.section(QLatin1Char('\n'), 0, 0), QMessageBox::Ok, this);
    box->setDetailedText(message);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setModal(false);
    box->show();
}

void MainWindow::verifyLoad()
{
    if (!m_session->index() || m_session->layoutPath().isEmpty()) {
        showError(tr("Verify"), tr("Open a checkpoint and a layout or model config first."));
        return;
    }
    showPanel(QStringLiteral("verify"));
    VerifyRequest request = m_verifyPanel->request();
    request.disabledRules = m_diffPanel->options().disabledRules;
    m_session->runVerify(std::move(request));
}

void MainWindow::plotLayers()
{
    const LayerKey key = layerKey(detailsKey());
    if (key.family.isEmpty()) {
        statusBar()->showMessage(tr("Select a tensor of a layer (…layers.N…) first"), 4000);
        return;
    }
    showPanel(QStringLiteral("layers"));
    m_session->runLayerStats(key.family);
}

void MainWindow::compareValues()
{
    if (!m_session->index() || !m_session->compareIndex()) {
        showError(tr("Compare values"),
                  tr("Open a second checkpoint first (File ▸ Compare With…)."));
        return;
    }
    showPanel(QStringLiteral("compare"));
    ValueDiffRequest request = m_comparePanel->valueRequest();
    request.disabledRules = m_diffPanel->options().disabledRules;
    m_session->runValues(std::move(request));
}

bool MainWindow::comparing() const
{
    return !m_session->comparePath().isEmpty() &&
           (m_bottomTabs->currentWidget() == m_comparePanel || m_session->layoutPath().isEmpty());
}

// A generated layout lives in the session's temporary folder: a report names it beside itself.
QString MainWindow::reportLayoutPath(const QString &reportPath) const
{
    if (m_session->layoutIsGenerated())
        return reportPath + QStringLiteral(".layout.json");
    return m_session->layoutPath();
}

QStringList MainWindow::reportArguments(const QString &path) const
{
    const QString layout = reportLayoutPath(path);
    if (comparing()) {
        const ValueDiffRequest values = m_comparePanel->valueRequest();
        return repro::compare(QStringLiteral("report"), m_session->path(), m_session->comparePath(),
                              m_diffPanel->options(), m_session->values() ? &values : nullptr,
                              layout, path);
    }
    return repro::diff(QStringLiteral("report"), m_session->path(), layout, m_diffPanel->options(),
                       path);
}

void MainWindow::exportReport(const QString &path)
{
    if (!reportFormatForPath(path.toStdString())) {
        showError(tr("Export report"), tr("%1: a report ends in .md, .html or .json").arg(path));
        return;
    }
    if (!m_session->index() || (!comparing() && m_session->layoutPath().isEmpty())) {
        showError(tr("Export report"),
                  tr("Check the checkpoint against a layout or model config, or compare it "
                     "with another checkpoint, first."));
        return;
    }
    const QString layout = reportLayoutPath(path);
    if (m_session->layoutIsGenerated()) {
        QFile generated(m_session->layoutPath());
        const std::optional<Error> error =
            generated.open(QIODevice::ReadOnly)
                ? writeFileAtomically(QFile::encodeName(layout).toStdString(),
                                      generated.readAll().toStdString())
                : makeError(Error::Code::Io, "cannot read the generated layout")
                      .inFile(QFile::encodeName(m_session->layoutPath()).toStdString());
        if (error) {
            showError(tr("Export report"), QString::fromStdString(error->toString()));
            return;
        }
    }
    const DiffOptions options = m_diffPanel->options();
    const std::string checkpoint = QFile::encodeName(m_session->path()).toStdString();
    const std::string layoutFile = QFile::encodeName(layout).toStdString();
    ReportRequest request;
    request.format = *reportFormatForPath(path.toStdString());
    request.context.command = repro::commandLine(reportArguments(path)).toStdString();
    if (comparing()) {
        const std::string second = QFile::encodeName(m_session->comparePath()).toStdString();
        request.against = CheckpointDiffRequest{checkpoint, second, options, nullptr, nullptr};
        if (m_session->values()) {
            ValueDiffRequest values = m_comparePanel->valueRequest();
            values.first = checkpoint;
            values.second = second;
            values.layout = layout.isEmpty() ? std::string() : layoutFile;
            values.disabledRules = options.disabledRules;
            request.values = values;
        }
    } else {
        // The report says what `fix` would repair, as the CLI's does.
        DiffOptions withRepair = options;
        withRepair.previewRepair = true;
        request.diff = DiffRequest{checkpoint, layoutFile, withRepair, nullptr};
    }
    m_session->exportReport(std::move(request), path);
}

void MainWindow::saveRepaired(const QString &output)
{
    FixRequest request;
    request.output = QFile::encodeName(output).toStdString();
    request.options = m_diffPanel->options();
    request.commandLine = repro::commandLine(repro::fix(m_session->path(), m_session->layoutPath(),
                                                        m_diffPanel->options(), output))
                              .toStdString();
    m_session->saveRepaired(std::move(request));
}

QString MainWindow::reproCommand() const
{
    if (m_session->path().isEmpty())
        return {};
    QString prefix;
    QString layout = m_session->layoutPath();
    if (m_session->layoutIsGenerated()) {
        layout = QStringLiteral("layout.json");
        prefix = repro::commandLine(
                     repro::layout(m_session->configPath(), m_session->layoutOptions(), layout)) +
                 QStringLiteral(" && ");
    }
    QStringList args;
    if (m_bottomTabs->currentWidget() == m_comparePanel && !m_session->comparePath().isEmpty()) {
        const ValueDiffRequest values = m_comparePanel->valueRequest();
        if (!m_session->values())
            prefix.clear(); // the structure needs no layout
        args = repro::compare(QStringLiteral("diff"), m_session->path(), m_session->comparePath(),
                              m_diffPanel->options(), m_session->values() ? &values : nullptr,
                              m_session->values() ? layout : QString());
    } else if (layout.isEmpty()) {
        return repro::commandLine(
            {QStringLiteral("shardscope-cli"), QStringLiteral("inspect"), m_session->path()});
    } else if (m_bottomTabs->currentWidget() == m_verifyPanel) {
        VerifyRequest request = m_verifyPanel->request();
        request.disabledRules = m_diffPanel->options().disabledRules;
        args = repro::verify(m_session->path(), layout, request);
    } else {
        args =
            repro::diff(QStringLiteral("diff"), m_session->path(), layout, m_diffPanel->options());
    }
    return prefix + repro::commandLine(args);
}

void MainWindow::restoreSettings()
{
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    m_hsplit->restoreState(settings.value(QStringLiteral("window/hsplit")).toByteArray());
    m_vsplit->restoreState(settings.value(QStringLiteral("window/vsplit")).toByteArray());
}

void MainWindow::closeEvent(QCloseEvent *event)
{
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/hsplit"), m_hsplit->saveState());
    settings.setValue(QStringLiteral("window/vsplit"), m_vsplit->saveState());
    QMainWindow::closeEvent(event);
}

bool MainWindow::detailsPending() const
{
    return !detailsKey().isEmpty() && m_details->isWaiting();
}

QString MainWindow::detailsKey() const
{
    const QModelIndex current = m_tree->currentIndex();
    if (!current.isValid() || NodeKind(current.data(KindRole).toInt()) == NodeKind::Group)
        return {};
    return m_details->currentKey();
}

void MainWindow::onKeysKnown(const IndexSnapshot &keys)
{
    auto tree = m_session->runner()->takePreparedTree(keys);
    if (!tree)
        return;
    m_details->clear();
    m_treeModel->adopt(std::move(tree));
    m_problemModel->setIndex(nullptr);
    m_filterBar->setDTypes(m_treeModel->dtypeNames());
    m_tree->expandToDepth(0);
    statusBar()->showMessage(tr("%1 keys read; reading where their data is stored…")
                                 .arg(formatCount(keys->tensors.size() + keys->objects.size())));
}

void MainWindow::onCheckpointOpened(const IndexSnapshot &index)
{
    StepTimer timer("opened");
    auto step = [&timer](const char *what) { timer.step(what); };
    // The tree shown while the metadata was read stays (expanded rows, selection), filled in.
    const IndexSnapshot early = m_session->runner()->keysCompletedBy(index);
    const bool completed = m_treeModel->isProvisional() && early &&
                           early == m_treeModel->checkpointIndex() &&
                           m_treeModel->completeIndex(index);
    if (!completed) {
        m_details->clear();
        if (auto tree = m_session->runner()->takePreparedTree(index))
            m_treeModel->adopt(std::move(tree));
        else
            m_treeModel->setIndex(index);
    }
    step("tree model");
    m_problemModel->setIndex(index);
    step("problem list");
    m_filterBar->setDTypes(m_treeModel->dtypeNames());
    if (!completed)
        m_tree->expandToDepth(0);
    step("tree view");
    updateStatusBar();
    step("status bar");
    runDiffWhenReady();
    if (!m_initialFilter.isEmpty())
        m_filterBar->setText(std::exchange(m_initialFilter, QString()));
    QModelIndex select;
    if (!m_initialKey.isEmpty()) {
        select = m_proxy->mapFromSource(m_treeModel->indexForKey(m_initialKey));
        if (!select.isValid())
            statusBar()->showMessage(tr("No entry named %1").arg(m_initialKey), 6000);
        m_initialKey.clear();
    }
    if (!select.isValid() && m_selectFirstTensor &&
        !(completed && m_tree->currentIndex().isValid()))
        select = m_tree->firstTensor();
    if (select.isValid()) {
        m_tree->selectIndex(select);
        m_tree->setFocus();
    } else if (completed) {
        onCurrentItemChanged(m_tree->currentIndex()); // chosen while it was being read
    }
}

void MainWindow::onOpenFailed(const QString &error)
{
    if (m_treeModel->isProvisional()) // keys shown early, then the rest failed to read
        m_treeModel->clear();
    showError(tr("Cannot open checkpoint"), error);
}

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

void MainWindow::onCurrentItemChanged(const QModelIndex &current)
{
    if (!current.isValid()) {
        m_details->clear();
        return;
    }
    const QModelIndex source = m_proxy->mapToSource(current);
    if (m_treeModel->isProvisional()) { // only keys are read: the rest comes when opened
        m_details->clear();
        return;
    }
    QStringList problems;
    for (const Problem *p : m_treeModel->problemsAt(source))
        problems.push_back(QString::fromStdString(p->message));
    // What the load does wrong with it joins what the reader found.
    if (current.data(LoadMarkRole).toInt() >= int(FirstAttentionMark))
        problems.push_back(source.siblingAtColumn(LoadColumn).data(Qt::ToolTipRole).toString());
    const QString key = current.data(KeyRole).toString();
    if (NodeKind(current.data(KindRole).toInt()) == NodeKind::Tensor)
        m_verifyPanel->selectStoredKey(key);
    m_layerPlot->setKey(NodeKind(current.data(KindRole).toInt()) == NodeKind::Tensor ? key
                                                                                     : QString());
    switch (NodeKind(current.data(KindRole).toInt())) {
    case NodeKind::Tensor:
        m_details->showTensor(m_treeModel->checkpointIndex(), current.data(EntryIndexRole).toInt(),
                              problems);
        m_session->runner()->requestTensorDetails(key);
        updateShardMap();
        break;
    case NodeKind::Object:
        m_details->showObject(key, current.siblingAtColumn(ShapeColumn).data().toString(),
                              problems);
        m_session->runner()->requestObject(key);
        break;
    case NodeKind::Group:
        m_details->showGroup(current);
        break;
    }
}

void MainWindow::onTensorDetails(const QString &, const TensorDetails &details)
{
    m_details->setTensorDetails(details);
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

void MainWindow::onProblemActivated(const QString &key)
{
    const QModelIndex source = m_treeModel->indexForKey(key);
    if (!source.isValid())
        return;
    QModelIndex proxied = m_proxy->mapFromSource(source);
    if (!proxied.isValid()) { // hidden by a filter: clear the filters and try again
        m_filterBar->reset();
        proxied = m_proxy->mapFromSource(source);
    }
    m_tree->selectIndex(proxied);
    m_tree->setFocus();
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

void MainWindow::dragEnterEvent(QDragEnterEvent *event)
{
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.size() == 1 && urls.first().isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent *event)
{
    const QList<QUrl> urls = event->mimeData()->urls();
    if (urls.size() == 1 && urls.first().isLocalFile()) {
        openPath(urls.first().toLocalFile());
        event->acceptProposedAction();
    }
}

} // namespace shardscope::gui
