// SPDX-License-Identifier: MIT
// What the window says is so, said once, in one vocabulary: the status bar leads with the load's
// outcome and the reading's problems are named apart, counted as the CLI counts them; a failed
// open leaves what was shown; a repair's check command names a layout that outlives the window
// and a repair is no change on disk; the verification, the load diff and the tree follow each
// other; every action has its shortcut; nothing is elided mid-number or named by a temporary
// path; a newly opened checkpoint says what it is checked against.
#include "mainwindow.h"
#include "testwait.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "model/diffchoices.h"
#include "model/difflistmodel.h"
#include "model/formatting.h"
#include "model/problemlistmodel.h"
#include "model/roles.h"
#include "model/verifytablemodel.h"
#include "widgets/checkpointtreeview.h"
#include "widgets/diffpanel.h"
#include "widgets/elidedlabel.h"
#include "widgets/problemspanel.h"
#include "widgets/verifypanel.h"

#include <QAction>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QProcess>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBrowser>
#include <QTreeView>

#include <gtest/gtest.h>

#include <set>

using namespace shardscope;
using namespace shardscope::model;
using shardscope::gui::MainWindow;
using shardscope::tests::waitFor;

namespace {

QString readText(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

// `shardscope-cli ARGS…` (argv[0] as the window writes it); its exit code.
int runCli(const QStringList &arguments)
{
    QProcess p;
    QStringList args{QStringLiteral("-c"), QStringLiteral("exec -a shardscope-cli \"$0\" \"$@\""),
                     QStringLiteral(SHARDSCOPE_TEST_CLI)};
    args << arguments.mid(1);
    p.start(QStringLiteral("/bin/bash"), args);
    if (!p.waitForFinished(300'000))
        return -1;
    if (p.exitCode() > 1)
        ADD_FAILURE() << p.readAllStandardError().toStdString();
    return p.exitCode();
}

DiffOptions negativeControlOptions()
{
    DiffOptions options;
    options.disabledRules = {"mla_down_proj"};
    options.strictLoad = false;
    options.strictness = Strictness::IgnoreAll;
    return options;
}

// `path` checked against the demo's config with Megatron's MLA handler off under a partial load:
// ten parameters silently kept at their initial values.
void openNegativeControl(MainWindow &w,
                         const QString &path = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR))
{
    w.setDiffOptions(negativeControlOptions());
    w.openPath(path);
    w.setConfigPath(QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR "/config.json"));
    CheckpointSession *s = w.session();
    ASSERT_TRUE(waitFor([&] {
        return s->diff() && !s->isJobRunning() && s->path() == path &&
               !s->diff()->outcome.keptAtInit.empty();
    }));
}

bool copyTree(const QString &from, const QString &to)
{
    QDir().mkpath(to);
    const QDir src(from);
    for (const QFileInfo &e :
         src.entryInfoList(QDir::Files | QDir::Dirs | QDir::Hidden | QDir::NoDotAndDotDot)) {
        const QString target = to + QLatin1Char('/') + e.fileName();
        if (e.isDir() ? !copyTree(e.filePath(), target) : !QFile::copy(e.filePath(), target))
            return false;
    }
    return true;
}

widgets::ElidedLabel *statusPart(MainWindow &w, const char *name)
{
    return w.statusBar()->findChild<widgets::ElidedLabel *>(QLatin1String(name));
}

} // namespace

// The status bar leads with the load's outcome, the reading's problems named apart; the Problems
// tab counts the load's problems as the CLI's report does; a group's details name both.
TEST(TrustTest, OneVocabularyCountedAsTheCliCounts)
{
    MainWindow w;
    w.resize(1366, 768);
    w.show();
    openNegativeControl(w);
    CheckpointSession *s = w.session();
    const DiffSnapshot diff = s->diff();

    auto *outcome = statusPart(w, "loadOutcome");
    auto *reading = statusPart(w, "readingProblems");
    auto *message = statusPart(w, "message");
    ASSERT_TRUE(outcome && reading && message);
    EXPECT_TRUE(outcome->isVisible());
    EXPECT_EQ(outcome->text(), loadSummary(*diff));
    EXPECT_TRUE(outcome->text().contains(QString::number(diff->outcome.keptAtInit.size())));
    // Its problems say how many are optimizer states: the total is not read against the kept
    // parameters' count as a contradiction.
    const auto stateProblems =
        std::count_if(diff->entries.begin(), diff->entries.end(), [](const DiffEntry &e) {
            return e.section == Section::Optimizer && isLoadProblem(e);
        });
    ASSERT_GT(stateProblems, 0);
    EXPECT_TRUE(outcome->text().contains(QStringLiteral("(%1 optimizer)").arg(stateProblems)))
        << outcome->text().toStdString();
    EXPECT_LT(outcome->x(), message->x()) << "the load's outcome leads";
    EXPECT_LT(message->x(), reading->x());
    EXPECT_TRUE(reading->text().startsWith(QStringLiteral("Reading: ")));
    EXPECT_EQ(reading->text().contains(QStringLiteral("no problems")),
              s->index()->problems.empty());

    // The load's problems, as many as the CLI's report counts.
    QTemporaryDir out;
    const QString json = out.filePath(QStringLiteral("report.json"));
    QStringList args{QStringLiteral("shardscope-cli"), QStringLiteral("report"), s->path(),
                     QStringLiteral("--layout"), s->layoutPath()};
    for (const std::string &r : diff->options.disabledRules)
        args << QStringLiteral("--disable-rule") << QString::fromStdString(r);
    args << QStringLiteral("--strictness") << strictnessNames().value(int(diff->options.strictness))
         << QStringLiteral("--no-strict") << QStringLiteral("-o") << json;
    const int rc = runCli(args);
    ASSERT_TRUE(rc == 0 || rc == 1) << rc;
    const QJsonObject report = QJsonDocument::fromJson(readText(json).toUtf8()).object();
    const int cliProblems = report.value(QStringLiteral("summary"))
                                .toObject()
                                .value(QStringLiteral("problem_entries"))
                                .toInt(-1);
    ASSERT_GT(cliProblems, 0) << readText(json).left(400).toStdString();
    auto *problems = w.findChild<widgets::ProblemsPanel *>();
    ASSERT_NE(problems, nullptr);
    auto *model = w.findChild<ProblemListModel *>();
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->loadProblemCount(), cliProblems);
    QString title;
    for (QLabel *l : problems->findChildren<QLabel *>())
        if (l->text().startsWith(QStringLiteral("Problems:")))
            title = l->text();
    EXPECT_TRUE(title.contains(
        QStringLiteral("%1 in the load").arg(countOf(uint64_t(cliProblems), "entry", "entries"))))
        << title.toStdString();
    // Activating a load problem selects where its data is stored.
    ASSERT_GT(model->rowCount(), 0);
    const QString stored = model->index(0, 0).data(KeyRole).toString();
    EXPECT_FALSE(stored.isEmpty());

    // A group holding kept keys: its details name the reading's problems and the load's apart.
    CheckpointTreeModel *tree = w.treeModel();
    const QModelIndex leaf = tree->indexForKey(stored);
    ASSERT_TRUE(leaf.isValid()) << stored.toStdString();
    const QModelIndex group = leaf.parent();
    ASSERT_TRUE(group.isValid());
    auto *view = w.findChild<widgets::CheckpointTreeView *>();
    auto *proxy = qobject_cast<CheckpointFilterProxy *>(view->model());
    view->selectIndex(proxy->mapFromSource(group));
    QStringList shown;
    for (QLabel *l : w.findChildren<QLabel *>())
        if (l->isVisible())
            shown << l->text();
    const QString load = group.siblingAtColumn(LoadColumn).data().toString();
    EXPECT_FALSE(load.isEmpty());
    EXPECT_TRUE(shown.contains(QStringLiteral("Reading problems")))
        << shown.join(QLatin1Char('|')).toStdString();
    EXPECT_TRUE(
        std::any_of(shown.begin(), shown.end(),
                    [&](const QString &t) { return t.startsWith(load + QLatin1Char(' ')); }))
        << load.toStdString() << " in " << shown.join(QLatin1Char('|')).toStdString();
    EXPECT_EQ(tree->headerData(StatusColumn, Qt::Horizontal).toString(), QStringLiteral("Reading"));
    // The job said what it checked against in words, never by the temporary layout's path.
    EXPECT_FALSE(message->text().contains(QStringLiteral("layout-")))
        << message->text().toStdString();
    EXPECT_FALSE(message->text().contains(QDir::tempPath())) << message->text().toStdString();
}

// A checkpoint that cannot be opened leaves the one shown, its title and tree, says so, and is not
// remembered as a recent file; one whose keys were shown before the rest failed to read too.
TEST(TrustTest, AFailedOpenLeavesTheCheckpointShown)
{
    QTemporaryDir tmp;
    const QString junk = tmp.filePath(QStringLiteral("junk.pt"));
    {
        QFile f(junk);
        ASSERT_TRUE(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(4096, '\x03'));
    }
    // The demo's metadata cut in its storage locations: its keys are read, then the open fails.
    const QString cut = tmp.filePath(QStringLiteral("cut"));
    ASSERT_TRUE(copyTree(QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR), cut));
    const QString metadata = cut + QStringLiteral("/iter_0000020/.metadata");
    const qint64 size = QFileInfo(metadata).size();
    ASSERT_TRUE(QFile::resize(metadata, size - size / 20));

    MainWindow w;
    w.resize(1366, 768);
    w.show();
    openNegativeControl(w);
    CheckpointSession *s = w.session();
    const QString title = w.windowTitle();
    const IndexSnapshot shown = s->index();
    const int rows = w.treeModel()->rowCount();
    QSignalSpy failed(s, &CheckpointSession::openFailed);
    QSignalSpy keys(s, &CheckpointSession::keysKnown);
    for (const QString &bad : {junk, cut}) {
        SCOPED_TRACE(bad.toStdString());
        failed.clear();
        w.openPath(bad);
        ASSERT_TRUE(waitFor([&] { return !failed.isEmpty(); }));
        QCoreApplication::processEvents();
        EXPECT_EQ(w.windowTitle(), title);
        EXPECT_TRUE(s->index() == shown) << "the session's checkpoint changed";
        EXPECT_TRUE(w.treeModel()->checkpointIndex() == shown) << "the tree's checkpoint changed";
        EXPECT_FALSE(w.treeModel()->isProvisional());
        EXPECT_EQ(w.treeModel()->rowCount(), rows);
        EXPECT_TRUE(s->diff()) << "the results of the checkpoint shown went";
        EXPECT_FALSE(MainWindow::recentFiles().contains(QFileInfo(bad).absoluteFilePath()));
        const QString said = statusPart(w, "message")->text();
        EXPECT_TRUE(said.contains(QStringLiteral("Cannot open %1").arg(QFileInfo(bad).fileName())))
            << said.toStdString();
        EXPECT_TRUE(said.contains(QStringLiteral("still showing"))) << said.toStdString();
    }
    EXPECT_EQ(keys.count(), 1) << "the cut metadata's keys were never shown: the case is not met";
}

// Save Repaired Checkpoint: the layout its check command names is saved beside the output and
// outlives the window; the command passes; the hard links it made are no change on disk, a
// save over the checkpoint is.
TEST(TrustTest, ARepairNamesALayoutThatOutlivesTheWindow)
{
    QTemporaryDir tmp;
    const QString copy = tmp.filePath(QStringLiteral("demo"));
    ASSERT_TRUE(copyTree(QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR), copy));
    const QString fixed = tmp.filePath(QStringLiteral("fixed"));
    QString summary, manifest, windowLayout;
    {
        MainWindow w;
        w.resize(1366, 768);
        w.show();
        openNegativeControl(w, copy);
        CheckpointSession *s = w.session();
        ASSERT_TRUE(s->layoutIsGenerated());
        windowLayout = s->layoutPath(); // the window's temporary one, gone with it
        ASSERT_FALSE(windowLayout.isEmpty());
        QSignalSpy changed(s, &CheckpointSession::changedOnDisk);
        auto c = QObject::connect(s, &CheckpointSession::repaired,
                                  [&](const QString &text) { summary = text; });
        w.saveRepaired(fixed);
        ASSERT_TRUE(waitFor([&] { return !summary.isEmpty() && !s->isJobRunning(); }));
        QObject::disconnect(c);
        QTest::qWait(500); // the hard links' attribute changes reach the watcher
        EXPECT_EQ(changed.count(), 0) << "a repair's hard links said the checkpoint changed";
        manifest = readText(fixed + QStringLiteral("/shardscope-fix.json"));

        // A save over the checkpoint is a change.
        QFile latest(copy + QStringLiteral("/latest_checkpointed_iteration.txt"));
        ASSERT_TRUE(latest.open(QIODevice::Append));
        latest.write("\n");
        latest.close();
        ASSERT_TRUE(changed.count() > 0 || changed.wait(10'000));
    }
    const QString kept = fixed + QStringLiteral(".layout.json");
    ASSERT_TRUE(QFileInfo::exists(kept)) << "the window's layout went with it";
    EXPECT_FALSE(summary.contains(windowLayout)) << summary.toStdString();
    EXPECT_FALSE(manifest.contains(windowLayout)) << manifest.left(400).toStdString();
    const QString marker = QStringLiteral("Check it with: ");
    ASSERT_TRUE(summary.contains(marker)) << summary.toStdString();
    const QString check = summary.mid(summary.indexOf(marker) + marker.size());
    EXPECT_TRUE(check.contains(kept)) << check.toStdString();
    const QJsonObject m = QJsonDocument::fromJson(manifest.toUtf8()).object();
    EXPECT_TRUE(m.value(QStringLiteral("command")).toString().contains(kept))
        << manifest.left(400).toStdString();
    // The window is gone: its check command still runs, and the repaired checkpoint passes.
    EXPECT_EQ(runCli(QProcess::splitCommand(check)), 0) << check.toStdString();

    // A second repair into the same output writes nothing (it exists): the layout the first
    // one's manifest names is left as it was, not taken with the failed job.
    const QString keptText = readText(kept);
    {
        MainWindow w;
        w.resize(1366, 768);
        w.show();
        openNegativeControl(w, copy);
        CheckpointSession *s = w.session();
        QString failure;
        auto c = QObject::connect(s, &CheckpointSession::jobEnded,
                                  [&](const JobInfo &job, bool ok, const QString &said) {
                                      if (job.kind == JobKind::Repair && !ok)
                                          failure = said;
                                  });
        w.saveRepaired(fixed);
        ASSERT_TRUE(waitFor([&] { return !failure.isEmpty() && !s->isJobRunning(); }));
        QObject::disconnect(c);
        EXPECT_TRUE(failure.contains(QStringLiteral("exists"))) << failure.toStdString();
    }
    ASSERT_TRUE(QFileInfo::exists(kept)) << "a failed repair took the earlier one's layout";
    EXPECT_EQ(readText(kept), keptText);
    EXPECT_TRUE(
        QDir(tmp.path())
            .entryList({QStringLiteral("*shardscope-earlier*")}, QDir::AllEntries | QDir::Hidden)
            .isEmpty());
    EXPECT_EQ(runCli(QProcess::splitCommand(check)), 0) << check.toStdString();
}

// A kept parameter's row in the verification selects where its data is stored, says why it has
// no statistics; a loaded row's remark is never worded as a problem; F8 in the load diff moves the
// tree's selection.
TEST(TrustTest, VerifyTheLoadDiffAndTheTreeFollowEachOther)
{
    MainWindow w;
    w.resize(1366, 768);
    w.show();
    openNegativeControl(w);
    CheckpointSession *s = w.session();
    w.verifyLoad();
    ASSERT_TRUE(waitFor([&] { return s->verification() && !s->isJobRunning(); }));
    VerifyTableModel *table = w.verifyPanel()->tableModel();
    auto *verifyView = w.verifyPanel()->findChild<QTreeView *>();
    ASSERT_NE(verifyView, nullptr);
    const QModelIndex kept = verifyView->model()->index(0, 0); // worst first
    ASSERT_EQ(kept.siblingAtColumn(VerifyTableModel::OutcomeColumn).data().toString(),
              QStringLiteral("kept_initial_values"));
    const QString key = kept.data(VerifyTableModel::SourceKeyRole).toString();
    ASSERT_FALSE(key.isEmpty()) << "a kept parameter names no stored key";
    verifyView->setCurrentIndex(kept);
    EXPECT_EQ(w.detailsKey(), key);
    for (int c : {VerifyTableModel::MeanColumn, VerifyTableModel::StdColumn,
                  VerifyTableModel::MinColumn, VerifyTableModel::MaxColumn})
        EXPECT_TRUE(kept.siblingAtColumn(c).data().toString().isEmpty()) << c;
    EXPECT_TRUE(kept.siblingAtColumn(VerifyTableModel::NoteColumn)
                    .data()
                    .toString()
                    .contains(QStringLiteral("no statistics")));
    EXPECT_TRUE(kept.data(VerifyTableModel::NoteIsProblemRole).toBool());
    int remarks = 0;
    for (int r = 0; r < table->rowCount(); ++r) {
        const QModelIndex i = table->index(r, 0);
        const QString note = i.siblingAtColumn(VerifyTableModel::NoteColumn).data().toString();
        if (i.siblingAtColumn(VerifyTableModel::OutcomeColumn).data().toString() !=
                QStringLiteral("bit_identical") ||
            note.isEmpty())
            continue;
        ++remarks;
        EXPECT_FALSE(i.data(VerifyTableModel::NoteIsProblemRole).toBool());
        EXPECT_TRUE(note.startsWith(QStringLiteral("note: "))) << note.toStdString();
    }
    EXPECT_GT(remarks, 0) << "no loaded row carries a remark: the case is not met";

    // F8 from anywhere: the next problem of the load diff, and its stored key in the tree.
    w.showPanel(QStringLiteral("diff"));
    w.activateWindow();
    QTest::keyClick(&w, Qt::Key_F8);
    auto *entries = w.diffPanel()->findChild<QTreeView *>(QStringLiteral("entries"));
    ASSERT_NE(entries, nullptr);
    const QModelIndex problem = entries->currentIndex();
    ASSERT_TRUE(problem.isValid());
    EXPECT_TRUE(problem.data(DiffListModel::KeptAtInitRole).toBool());
    const QString stored = problem.data(DiffListModel::StoredKeyRole).toString();
    ASSERT_FALSE(stored.isEmpty());
    EXPECT_EQ(w.detailsKey(), stored);
}

// Every action in the menus has a shortcut (README promises it), and no two share one.
TEST(TrustTest, EveryMenuActionHasItsOwnShortcut)
{
    MainWindow w;
    std::map<QString, QString> seen;
    std::function<void(QMenu *)> walk = [&](QMenu *menu) {
        for (QAction *a : menu->actions()) {
            if (a->isSeparator())
                continue;
            if (a->menu()) { // Open Recent: its entries are files
                continue;
            }
            const QString key = a->shortcut().toString();
            EXPECT_FALSE(key.isEmpty()) << a->text().toStdString() << " has no shortcut";
            if (key.isEmpty())
                continue;
            EXPECT_EQ(seen.count(key), 0u) << key.toStdString() << ": " << a->text().toStdString()
                                           << " and " << seen[key].toStdString();
            seen[key] = a->text();
        }
    };
    for (QAction *top : w.menuBar()->actions())
        if (top->menu())
            walk(top->menu());
    EXPECT_GE(seen.size(), 25u);
}

// Under a filter a group's "30,335 of 650,681 entries" is read whole, never elided mid-number.
TEST(TrustTest, FilteredCountsAreNeverElided)
{
    auto index = std::make_shared<CheckpointIndex>();
    for (int l = 0; l < 61; ++l)
        for (int e = 0; e < 2000; ++e) {
            TensorEntry t;
            t.key =
                "model.layers." + std::to_string(l) + ".experts." + std::to_string(e) + ".weight";
            t.dtype = DType::BFloat16;
            t.dtypeName = "bfloat16";
            t.shape = std::vector<int64_t>{4, 4};
            t.chunks.push_back(Location{});
            for (int64_t d : {0, 0, 4, 4})
                t.chunkDims.push_back(d);
            index->tensors.push_back(std::move(t));
        }
    CheckpointTreeModel model;
    model.setIndex(index);
    CheckpointFilterProxy proxy;
    proxy.setSourceModel(&model);
    widgets::CheckpointTreeView view;
    view.setModel(&proxy);
    view.resize(900, 400);
    view.show();
    proxy.setFilterText(QStringLiteral("experts.1"));
    view.expandToDepth(0);
    QTest::qWait(50);
    const QModelIndex top = proxy.index(0, ShapeColumn);
    const QString text = top.data().toString();
    ASSERT_TRUE(text.contains(QStringLiteral(" of 122,000 entries"))) << text.toStdString();
    EXPECT_GE(view.header()->sectionSize(ShapeColumn),
              view.fontMetrics().horizontalAdvance(text) + 8)
        << text.toStdString();
}

// Another checkpoint opened keeps the layout and the rules, and says so; the load diff's banner
// says what it is checked against and how.
TEST(TrustTest, ANewCheckpointSaysWhatItIsCheckedAgainst)
{
    MainWindow w;
    w.resize(1366, 768);
    w.show();
    openNegativeControl(w);
    auto *banner = w.diffPanel()->findChild<QLabel *>(QStringLiteral("banner"));
    ASSERT_NE(banner, nullptr);
    EXPECT_TRUE(
        banner->text().contains(QStringLiteral("Checked against the layout of config.json")))
        << banner->text().toStdString();
    EXPECT_TRUE(banner->text().contains(QStringLiteral("rules off: mla_down_proj")));
    const QString changed = QStringLiteral(SHARDSCOPE_TEST_CHANGED);
    CheckpointSession *s = w.session();
    w.openPath(changed);
    ASSERT_TRUE(waitFor([&] { return s->path() == changed && s->diff() && !s->isJobRunning(); }));
    const QString said = statusPart(w, "message")->text();
    EXPECT_TRUE(said.contains(QStringLiteral("same rules, as the checkpoint before")))
        << said.toStdString();
    EXPECT_TRUE(banner->text().contains(QStringLiteral("rules off: mla_down_proj")));
    // Reports and repairs go where the user wrote last, else the documents: never into the
    // checkpoint's own folder (for the demo, the application's resources).
    EXPECT_FALSE(w.outputFolder().startsWith(
        QFileInfo(QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR)).absolutePath()))
        << w.outputFolder().toStdString();
}
