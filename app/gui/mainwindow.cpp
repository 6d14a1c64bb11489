// SPDX-License-Identifier: MIT
#include "mainwindow.h"
#include "panelbinders.h"
#include "steptimer.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "model/diffchoices.h"
#include "model/formatting.h"
#include "model/layerfamily.h"
#include "model/loadmarks.h"
#include "model/problemlistmodel.h"
#include "model/roles.h"
#include "model/shardmap.h"
#include "widgets/checkpointtreeview.h"
#include "widgets/comparepanel.h"
#include "widgets/diffpanel.h"
#include "widgets/filterbar.h"
#include "widgets/layerplot.h"
#include "widgets/problemspanel.h"
#include "widgets/shardmapplot.h"
#include "widgets/statusstyle.h"
#include "widgets/tensordetailspanel.h"
#include "widgets/verifypanel.h"

#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include <utility>

using namespace shardscope::model;
using namespace shardscope::widgets;

namespace shardscope::gui {

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
    // The details scroll when the panel below takes the height: the tree and its details never
    // hold the load diff to a few rows.
    auto *detailsScroll = new QScrollArea(this);
    detailsScroll->setWidget(m_details);
    detailsScroll->setWidgetResizable(true);
    detailsScroll->setFrameShape(QFrame::NoFrame);
    m_rightTabs->addTab(detailsScroll, tr("Details"));
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
    connect(m_bottomTabs, &QTabWidget::currentChanged, this, &MainWindow::makeRoomForPanel);

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
    connect(m_filterBar, &FilterBar::textChanged, m_diffPanel, &DiffPanel::setFilterText);
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
    });
    connect(m_session, &CheckpointSession::jobProgress, this, &MainWindow::onJobProgress);
    connect(m_session, &CheckpointSession::jobEnded, this, &MainWindow::onJobEnded);
    connect(m_session, &CheckpointSession::jobEnded, this, [this](bool ok, const QString &message) {
        switch (m_session->jobKind()) {
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
    // Each panel's own wiring to the session (panelbinders.h), after the window's: the status
    // bar hears of a job before the panel running it does.
    bindDiffPanel(m_diffPanel, m_session, *this);
    bindVerifyPanel(m_verifyPanel, m_session, *this);
    bindComparePanel(m_comparePanel, m_session, *this);
    bindLayerPlot(m_layerPlot, m_session, *this);

    updateStatusBar();
}

MainWindow::~MainWindow() = default;

void MainWindow::setFlatList(bool on)
{
    m_flatAction->setChecked(on);
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
        {"details", m_rightTabs->widget(0)}, {"shards", m_shardMap}, {"layers", m_layerPlot}};
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
    makeRoomForPanel();
}

void MainWindow::makeRoomForPanel()
{
    // A panel of tables needs room: three fifths of the height (a dozen rows of the load diff
    // and more at 900 pixels, with the tree still showing fifteen), whichever way it was chosen.
    if (m_bottomTabs->currentWidget() == m_problems)
        return;
    // Before the window is shown its final size is not known: a resize would hand the room
    // back to the tree (the splitter gives it five parts of every change in height).
    if (!isVisible()) {
        m_roomOnShow = true;
        return;
    }
    const QList<int> sizes = m_vsplit->sizes();
    const int total = sizes.value(0) + sizes.value(1);
    if (total > 0 && sizes.value(1) < total * 11 / 20)
        m_vsplit->setSizes({total * 2 / 5, total - total * 2 / 5});
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

DiffOptions MainWindow::diffOptions() const
{
    return m_diffPanel->options();
}

QWidget *MainWindow::dialogParent()
{
    return this;
}

bool MainWindow::comparing() const
{
    return !m_session->comparePath().isEmpty() &&
           (m_bottomTabs->currentWidget() == m_comparePanel || m_session->layoutPath().isEmpty());
}

void MainWindow::restoreSettings()
{
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    m_hsplit->restoreState(settings.value(QStringLiteral("window/hsplit")).toByteArray());
    m_vsplit->restoreState(settings.value(QStringLiteral("window/vsplit")).toByteArray());
}

void MainWindow::showEvent(QShowEvent *event)
{
    QMainWindow::showEvent(event);
    if (std::exchange(m_roomOnShow, false))
        QTimer::singleShot(0, this, &MainWindow::makeRoomForPanel);
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
