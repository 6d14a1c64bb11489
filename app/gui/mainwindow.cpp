// SPDX-License-Identifier: MIT
#include "mainwindow.h"
#include "panelbinders.h"
#include "remotebrowser.h"
#include "remoteconnect.h"
#include "steptimer.h"

#include "model/checkpointbackend.h"
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
#include "widgets/elidedlabel.h"
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
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <memory>
#include <utility>

using namespace shardscope::model;
using namespace shardscope::widgets;

namespace shardscope::gui {

MainWindow::MainWindow(QWidget *parent)
    : MainWindow(localBackend(), parent)
{}

MainWindow::MainWindow(std::shared_ptr<CheckpointBackend> backend, QWidget *parent)
    : QMainWindow(parent)
    , m_session(new CheckpointSession(backend, this))
    , m_remote(std::dynamic_pointer_cast<model::RemoteBackend>(std::move(backend)))
    , m_treeModel(new CheckpointTreeModel(this))
    , m_proxy(new CheckpointFilterProxy(this))
    , m_problemModel(new ProblemListModel(this))
{
    setWindowTitle(QStringLiteral("ShardScope"));
    setAcceptDrops(true);
    m_session->setRemoteConnector(windowConnector(this)); // a compare's prompts in dialogs
    m_proxy->setSourceModel(m_treeModel);

    // Left: filter bar over the tree. Right: details. Bottom: problems.
    auto *left = new QWidget(this);
    auto *leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(4, 4, 0, 0);
    leftLayout->setSpacing(4);
    m_filterBar = new FilterBar(left);
    m_tree = new CheckpointTreeView(left);
    m_tree->setModel(m_proxy);
    // The Load column marks stored keys: what the load lacks altogether is said above it, so
    // that a load that raises never sits beside an all-green column without a word.
    m_unstoredNote = new QLabel(left);
    m_unstoredNote->setObjectName(QStringLiteral("unstoredProblems"));
    m_unstoredNote->setWordWrap(true);
    m_unstoredNote->hide();
    connect(m_unstoredNote, &QLabel::linkActivated, this,
            [this] { showPanel(QStringLiteral("diff")); });
    leftLayout->addWidget(m_filterBar);
    leftLayout->addWidget(m_unstoredNote);
    leftLayout->addWidget(m_tree, 1);

    m_details = new TensorDetailsPanel(this);
    m_problems = new ProblemsPanel(this);
    m_problems->setModel(m_problemModel);

    // Right: the selected entry's details, its shard map, and its family across layers.
    m_shardMap = new ShardMapPlot(this);
    m_layerPlot = new LayerPlot(this);
    m_rightTabs = new QTabWidget(this);
    m_rightTabs->setObjectName(QStringLiteral("rightTabs"));
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
    m_bottomTabs->setObjectName(QStringLiteral("bottomTabs"));
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

    // Status bar, at any width: the load's outcome first, then what just happened, then what
    // reading the checkpoint found and what it holds; a job's progress, time left and Cancel
    // at the end. Every part elides (its whole text in the tooltip), none pushes another out.
    // One line of its own layout (QStatusBar only relays out when its height changes): each
    // part keeps its whole text while there is room, the message takes what is left.
    auto *line = new QWidget(this);
    line->setObjectName(QStringLiteral("statusLine"));
    auto *lineLayout = new QHBoxLayout(line);
    lineLayout->setContentsMargins(0, 0, 0, 0);
    lineLayout->setSpacing(8);
    m_diffLabel = new ElidedLabel(line);
    m_diffLabel->setObjectName(QStringLiteral("loadOutcome"));
    m_diffLabel->setBold(true);
    m_diffLabel->hide();
    m_messageLabel = new ElidedLabel(line);
    m_messageLabel->setObjectName(QStringLiteral("message"));
    m_messageLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_problemsLabel = new ElidedLabel(line);
    m_problemsLabel->setObjectName(QStringLiteral("readingProblems"));
    m_formatLabel = new ElidedLabel(line);
    m_formatLabel->setObjectName(QStringLiteral("contents"));
    m_messageTimer = new QTimer(this);
    m_messageTimer->setSingleShot(true);
    connect(m_messageTimer, &QTimer::timeout, this, [this] { say({}); });
    // A job (open, diff, verify, compare, …): its stage, progress with the time left, a cancel.
    m_jobLabel = new ElidedLabel(line);
    m_jobLabel->setObjectName(QStringLiteral("job"));
    m_jobProgress = new QProgressBar(line);
    m_jobProgress->setObjectName(QStringLiteral("jobProgress"));
    m_jobProgress->setFixedWidth(
        fontMetrics().horizontalAdvance(QStringLiteral("100% · about 59 min left")) + 16);
    m_jobProgress->setMaximumHeight(fontMetrics().height() + 4);
    m_cancelJob = new QToolButton(line);
    m_cancelJob->setObjectName(QStringLiteral("cancelJob"));
    m_cancelJob->setText(tr("Cancel"));
    m_cancelJob->setToolTip(tr("Cancel the running jobs (Shift+Esc)"));
    m_cancelJob->setAutoRaise(true);
    connect(m_cancelJob, &QToolButton::clicked, m_session, &CheckpointSession::cancel);
    lineLayout->addWidget(m_diffLabel);
    lineLayout->addWidget(m_messageLabel, 1);
    lineLayout->addWidget(m_problemsLabel);
    lineLayout->addWidget(m_formatLabel);
    lineLayout->addWidget(m_jobLabel);
    lineLayout->addWidget(m_jobProgress);
    lineLayout->addWidget(m_cancelJob);
    for (QWidget *w : {static_cast<QWidget *>(m_jobLabel), static_cast<QWidget *>(m_jobProgress),
                       static_cast<QWidget *>(m_cancelJob)})
        w->hide();
    statusBar()->addWidget(line, 1);
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

    connect(m_session, &CheckpointSession::keysKnown, this, &MainWindow::onKeysKnown);
    connect(m_session, &CheckpointSession::opened, this, &MainWindow::onCheckpointOpened);
    connect(m_session, &CheckpointSession::openFailed, this, &MainWindow::onOpenFailed);
    connect(m_session, &CheckpointSession::compareOpenFailed, this,
            [this](const QString &, const QString &error) {
                showError(tr("Cannot open the checkpoint to compare with"), error);
            });
    connect(m_session, &CheckpointSession::layoutChanged, this, [this] {
        m_diffWanted = true;
        m_configPending = false;
        runDiffWhenReady();
    });
    connect(m_session, &CheckpointSession::diffChanged, this, &MainWindow::onDiffChanged);
    connect(m_session, &CheckpointSession::loadProblemsChanged, m_problemModel,
            &ProblemListModel::setFolded);
    connect(m_filterBar, &FilterBar::textChanged, m_diffPanel, &DiffPanel::setFilterText);
    connect(m_session, &CheckpointSession::reloaded, this,
            [this](const QString &summary) { say(summary, 30000); });
    connect(m_session, &CheckpointSession::changedOnDisk, this, [this] {
        say(tr("The checkpoint changed on disk: File ▸ Reload (F5) reads it again"));
    });
    connect(m_session, &CheckpointSession::jobStarted, this, &MainWindow::onJobStarted);
    connect(m_session, &CheckpointSession::jobProgress, this, &MainWindow::onJobProgress);
    connect(m_session, &CheckpointSession::jobEnded, this, &MainWindow::onJobEnded);
    connect(m_session, &CheckpointSession::repaired, this, [this](const QString &summary) {
        say(summary);
        if (!isVisible() || testAttribute(Qt::WA_DontShowOnScreen))
            return;
        auto *box = new QMessageBox(QMessageBox::Information, tr("Save repaired checkpoint"),
                                    summary, QMessageBox::Ok, this);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->setModal(false);
        box->show();
    });
    connect(m_session, &CheckpointSession::tensorDetailsReady, m_details,
            &TensorDetailsPanel::setTensorDetails);
    connect(m_session, &CheckpointSession::objectReady, m_details,
            &TensorDetailsPanel::setObjectDetails);
    // Each panel's own wiring to the session (panelbinders.h), after the window's: the status
    // bar hears of a job before the panel running it does.
    bindDiffPanel(m_diffPanel, m_session, *this);
    bindVerifyPanel(m_verifyPanel, m_session, *this, m_remote);
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
    if (m_remote) { // a path there, browsed through the same connection
        const QString shown = m_session->path();
        const QString path =
            browseRemote(this, m_remote, shown.isEmpty() ? QString() : QFileInfo(shown).path());
        if (!path.isEmpty())
            openPath(path);
        return;
    }
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Open Checkpoint Directory"), QFileInfo(m_session->path()).absolutePath());
    if (!dir.isEmpty())
        openPath(dir);
}

void MainWindow::openFileDialog()
{
    if (m_remote) {
        openDirectoryDialog();
        return;
    }
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
}

void MainWindow::addRecentFile(const QString &path)
{
    if (const QString host = m_session->location(); !host.isEmpty()) {
        addRecentRemoteLocation(host, path, remoteServerFor(host));
        return;
    }
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
    // Remote locations open in a window of their own, connected to their host.
    const QStringList remote = recentRemoteLocations();
    if (!remote.isEmpty())
        m_recentMenu->addSection(tr("Remote"));
    for (const QString &where : remote)
        connect(m_recentMenu->addAction(where), &QAction::triggered, this, [this, where] {
            const QString host = where.section(QLatin1Char(':'), 0, 0);
            openRemoteWindow(this, host, where.section(QLatin1Char(':'), 1), remoteServerFor(host));
        });
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
    if (m_diffWanted && m_session->index() && m_session->openingPath().isEmpty() &&
        !m_session->layoutPath().isEmpty())
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
    auto marks = m_session->loadMarks();
    timer.step("computed");
    m_treeModel->setLoadMarks(std::move(marks));
    timer.step("tree model");
    m_tree->setColumnHidden(LoadColumn, m_session->diff() == nullptr);
    updateShardMap();
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
    StepTimer timer("diff changed");
    updateLoadMarks();
    timer.step("load marks");
    m_problemModel->setDiff(diff, m_session->loadProblems());
    timer.step("problem list");
    if (!diff) {
        m_diffLabel->hide();
        m_unstoredNote->hide();
        return;
    }
    size_t unstored = 0;
    for (const DiffEntry &e : diff->entries)
        unstored += isLoadProblem(e) && e.sources.empty() && e.unreadKeys.empty();
    m_unstoredNote->setVisible(unstored > 0);
    if (unstored)
        m_unstoredNote->setText(
            tr("<span style=\"color:%1\">⚠ %2 of the load's problems: entries no stored key "
               "holds, so the Load column has nothing to mark for them.</span> <a "
               "href=\"diff\">The load diff lists them</a>.")
                .arg(widgets::attentionColor(widgets::Attention::Bad, palette()).name(),
                     formatCount(unstored)));
    // The load's outcome leads the status bar, in the diff panel's words and colour.
    m_diffLabel->setText(loadSummary(*diff));
    m_diffLabel->setToolTip(diff->outcome.message.empty()
                                ? loadSummary(*diff)
                                : loadSummary(*diff) + QLatin1Char('\n') +
                                      QString::fromStdString(diff->outcome.message));
    m_diffLabel->setColor(diff->clean() ? QColor()
                                        : widgets::attentionColor(diff->outcome.keptAtInit.empty()
                                                                      ? widgets::Attention::Bad
                                                                      : widgets::Attention::Worst,
                                                                  palette()));
    m_diffLabel->show();
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
    say(tr("%1: %2").arg(title, message), 60000);
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
    showPanel(QStringLiteral("verify"));
    m_verifyPanel->run(); // its binder checks what it needs and starts it
}

void MainWindow::plotLayers()
{
    const LayerKey key = layerKey(detailsKey());
    if (key.family.isEmpty()) {
        say(tr("Select a tensor of a layer (…layers.N…) first"), 4000);
        return;
    }
    showPanel(QStringLiteral("layers"));
    m_session->runLayerStats(key.family);
}

void MainWindow::compareValues()
{
    showPanel(QStringLiteral("compare"));
    m_comparePanel->compareValues(); // its binder checks what it needs and starts it
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
    fitToScreen();
    m_fitWithFrame = true;
}

// A window saved on a big screen, reopened on a laptop's: within the screen it opens on, never
// larger, never partly off it.
void MainWindow::fitToScreen()
{
    const QScreen *on = screen();
    if (!on)
        return;
    const QRect room = on->availableGeometry();
    // What the window manager adds around the window: unknown before it is shown, so none is
    // assumed then, and showEvent() fits the window again once the frame is known.
    const QMargins frame = isVisible() ? QMargins(geometry().left() - frameGeometry().left(),
                                                  geometry().top() - frameGeometry().top(),
                                                  frameGeometry().right() - geometry().right(),
                                                  frameGeometry().bottom() - geometry().bottom())
                                       : QMargins(0, 0, 0, 0);
    const QSize most(room.width() - frame.left() - frame.right(),
                     room.height() - frame.top() - frame.bottom());
    QRect g = geometry();
    g.setSize(g.size().boundedTo(most).expandedTo(minimumSizeHint().boundedTo(most)));
    // Moved back inside, the frame included.
    const int left = room.left() + frame.left(), top = room.top() + frame.top();
    const int right = room.right() - frame.right(), bottom = room.bottom() - frame.bottom();
    g.moveLeft(std::clamp(g.left(), left, std::max(left, right - g.width() + 1)));
    g.moveTop(std::clamp(g.top(), top, std::max(top, bottom - g.height() + 1)));
    if (g != geometry())
        setGeometry(g);
}

void MainWindow::showEvent(QShowEvent *event)
{
    QMainWindow::showEvent(event);
    if (std::exchange(m_roomOnShow, false))
        QTimer::singleShot(0, this, &MainWindow::makeRoomForPanel);
    // A window manager frames the window after it is shown (a title bar above it, borders),
    // with no event of its own: the geometry restoreSettings() fitted without a frame is
    // fitted again once the frame is known (within two seconds, or never: no window manager).
    if (std::exchange(m_fitWithFrame, false)) {
        auto *poll = new QTimer(this);
        auto tries = std::make_shared<int>(40);
        connect(poll, &QTimer::timeout, this, [this, poll, tries] {
            if (frameGeometry() != geometry() && !isMaximized() && !isFullScreen())
                fitToScreen();
            else if (--*tries > 0)
                return;
            poll->deleteLater();
        });
        poll->start(50);
    }
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
    auto tree = m_session->takePreparedTree(keys);
    if (!tree)
        return;
    m_details->clear();
    m_treeModel->adopt(std::move(tree));
    m_problemModel->setIndex(nullptr);
    m_filterBar->setDTypes(m_treeModel->dtypeNames());
    m_tree->expandToDepth(0);
    const QString count = formatCount(keys->tensors.size() + keys->objects.size());
    say(m_treeModel->isTopOnly()
            ? tr("%1 keys read; building their tree…").arg(count)
            : tr("%1 keys read; reading where their data is stored…").arg(count));
}

void MainWindow::onCheckpointOpened(const IndexSnapshot &index)
{
    StepTimer timer("opened");
    // The tree shown while the metadata was read stays (expanded rows, selection), filled in.
    const IndexSnapshot early = m_session->keysCompletedBy(index);
    const bool completed = m_treeModel->isProvisional() && early &&
                           early == m_treeModel->checkpointIndex() &&
                           m_treeModel->completeIndex(index);
    timer.step("tree completed");
    showCheckpoint(index, completed);
    timer.step("shown");
    addRecentFile(m_session->path());
    // Another checkpoint keeps the layout and the rules: said, never silently.
    const bool another = !m_shownPath.isEmpty() && m_shownPath != m_session->path();
    m_shownPath = m_session->path();
    if (another && m_diffWanted && !m_session->layoutPath().isEmpty())
        say(tr("Checking %1 against %2 with the same rules, as the checkpoint before: File ▸ "
               "Check Against Layout… (Ctrl+Shift+L) or Model Config… (Ctrl+Shift+M) to change")
                .arg(QFileInfo(m_shownPath).fileName(), m_session->layoutName()),
            15000);
    runDiffWhenReady();
    if (!m_initialFilter.isEmpty())
        m_filterBar->setText(std::exchange(m_initialFilter, QString()));
    QModelIndex select;
    if (!m_initialKey.isEmpty()) {
        select = m_proxy->mapFromSource(m_treeModel->indexForKey(m_initialKey));
        if (!select.isValid())
            say(tr("No entry named %1").arg(m_initialKey), 6000);
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

void MainWindow::showCheckpoint(const IndexSnapshot &index, bool completed)
{
    StepTimer timer("show checkpoint");
    if (!completed) {
        m_details->clear();
        if (auto tree = m_session->takePreparedTree(index))
            m_treeModel->adopt(std::move(tree));
        else
            m_treeModel->setIndex(index);
    }
    timer.step("tree model");
    m_problemModel->setIndex(index);
    timer.step("problem list");
    m_filterBar->setDTypes(m_treeModel->dtypeNames());
    if (!completed)
        m_tree->expandToDepth(0);
    timer.step("tree view");
    updateLoadMarks();
    updateTitle();
    updateStatusBar();
    timer.step("status bar");
}

void MainWindow::onOpenFailed(const QString &path, const QString &error)
{
    // The keys shown early, then the rest failed to read: the checkpoint shown before comes
    // back, as it was.
    if (m_treeModel->isProvisional())
        showCheckpoint(m_session->index(), false);
    const QString shown = m_session->path().isEmpty()
                              ? tr("nothing is open")
                              : tr("still showing %1").arg(QFileInfo(m_session->path()).fileName());
    showError(tr("Cannot open %1 (%2)").arg(QFileInfo(path).fileName(), shown), error);
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
        m_session->requestTensorDetails(key);
        updateShardMap();
        break;
    case NodeKind::Object:
        m_details->showObject(key, current.siblingAtColumn(ShapeColumn).data().toString(),
                              problems);
        m_session->requestObject(key);
        break;
    case NodeKind::Group:
        m_details->showGroup(current);
        break;
    }
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
