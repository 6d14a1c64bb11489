// SPDX-License-Identifier: MIT
// The README's walk-through, a failed open and a repair, done on the real window at a laptop's
// 1366×768 as a person does them: the tabs, menus, check boxes and rows clicked, the shortcuts
// and the file dialogs typed into (QTest's events; under Xvfb with a window manager when CTest
// finds one, see CMakeLists.txt). What each step promises is checked where a person reads it.
#include "mainwindow.h"
#include "testwait.h"

#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "model/difflistmodel.h"
#include "model/roles.h"
#include "model/verifytablemodel.h"
#include "widgets/checkpointtreeview.h"
#include "widgets/diffpanel.h"
#include "widgets/elidedlabel.h"
#include "widgets/filterbar.h"
#include "widgets/verifypanel.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPointer>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QStatusBar>
#include <QTabBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QToolButton>
#include <QTreeView>

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>

using namespace shardscope;
using namespace shardscope::model;
using shardscope::gui::MainWindow;
using shardscope::tests::waitFor;

namespace {

const QString kDemo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);

// A folder for what the tests save, kept until the program ends (a file dialog opens in the
// folder the last one was left in).
QString savedIn(const QString &name)
{
    static QTemporaryDir dir;
    QDir(dir.path()).mkpath(name);
    return dir.filePath(name);
}

// Runs `act` on each timer tick until it returns true (at most 20 s): a menu's or a modal
// dialog's own event loop blocks the click or key that opened it until it closes.
void whenShown(const std::function<bool()> &act)
{
    auto *timer = new QTimer;
    auto *clock = new QElapsedTimer;
    clock->start();
    timer->setInterval(20);
    QObject::connect(timer, &QTimer::timeout, [timer, clock, act] {
        if (act() || clock->elapsed() > 20'000) {
            timer->stop();
            timer->deleteLater();
            delete clock;
        }
    });
    timer->start();
}

// The file dialog that opens next: `path` typed into its name field, then Enter; typed again while
// the dialog stays open (it may clear the field as it reads its folder, or the first Enter only
// close the field's completion list).
void typeIntoFileDialog(const QString &path)
{
    struct Seen
    {
        bool once = false;
        QPointer<QFileDialog> dialog;
    };
    auto seen = std::make_shared<Seen>();
    whenShown([path, seen] {
        if (!seen->once) {
            seen->dialog = qobject_cast<QFileDialog *>(QApplication::activeModalWidget());
            seen->once = seen->dialog;
            if (!seen->once)
                return false; // not open yet
        }
        QFileDialog *dialog = seen->dialog;
        if (!dialog || !dialog->isVisible())
            return true; // accepted (a static QFileDialog call deletes it)
        auto *name = dialog->findChild<QLineEdit *>(QStringLiteral("fileNameEdit"));
        if (!name)
            return false;
        if (name->text() != path) {
            name->setFocus();
            name->selectAll();
            QTest::keyClicks(name, path);
        }
        QTest::keyClick(name, Qt::Key_Return);
        return false;
    });
}

// The popup menu that opens next: its action `text` clicked.
void clickInMenu(const QString &text)
{
    whenShown([text] {
        auto *menu = qobject_cast<QMenu *>(QApplication::activePopupWidget());
        if (!menu || !menu->isVisible())
            return false;
        for (QAction *a : menu->actions())
            if (a->text() == text) {
                QTest::mouseClick(menu, Qt::LeftButton, {}, menu->actionGeometry(a).center());
                return true;
            }
        ADD_FAILURE() << "no " << text.toStdString() << " in the menu";
        menu->close();
        return true;
    });
}

void clickTab(QTabWidget *tabs, const QString &title)
{
    QTabBar *bar = tabs->tabBar();
    for (int i = 0; i < bar->count(); ++i)
        if (bar->tabText(i).remove(QLatin1Char('&')) == title) {
            QTest::mouseClick(bar, Qt::LeftButton, {}, bar->tabRect(i).center());
            return;
        }
    ADD_FAILURE() << "no tab " << title.toStdString();
}

void press(QWidget *w, Qt::Key key, Qt::KeyboardModifiers modifiers = {})
{
    QTest::keyClick(w, key, modifiers);
}

QString statusPart(MainWindow &w, const char *name)
{
    auto *label = w.statusBar()->findChild<widgets::ElidedLabel *>(QLatin1String(name));
    return label ? label->text() : QString();
}

// `shardscope-cli ARGS…` as a person pastes it (argv[0] the name the window writes); its exit
// code, its output in `out`.
int runCli(const QStringList &arguments, QString *out = nullptr)
{
    QProcess p;
    QStringList args{QStringLiteral("-c"), QStringLiteral("exec -a shardscope-cli \"$0\" \"$@\""),
                     QStringLiteral(SHARDSCOPE_TEST_CLI)};
    args << arguments.mid(1);
    p.start(QStringLiteral("/bin/bash"), args);
    if (!p.waitForFinished(300'000))
        return -1;
    if (out)
        *out = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    return p.exitCode();
}

// A command line as a person pastes it into a shell in `folder`, with shardscope-cli on the
// PATH; its exit code, its output in `out`.
int runShell(const QString &command, const QString &folder, QString *out)
{
    QProcess p;
    p.setWorkingDirectory(folder);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("PATH"),
               QFileInfo(QStringLiteral(SHARDSCOPE_TEST_CLI)).absolutePath() + QLatin1Char(':') +
                   env.value(QStringLiteral("PATH")));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral("/bin/bash"), {QStringLiteral("-c"), command});
    if (!p.waitForFinished(300'000))
        return -1;
    *out = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    return p.exitCode();
}

bool idleWithDiff(CheckpointSession *s)
{
    return s->diff() && !s->isJobRunning();
}

// The stored keys the load diff's rows name as silently kept at their initial values.
std::set<QString> keptInDiff(QTreeView *entries)
{
    std::set<QString> out;
    QAbstractItemModel *m = entries->model();
    for (int r = 0; r < m->rowCount(); ++r)
        if (m->index(r, 0).data(DiffListModel::KeptAtInitRole).toBool())
            out.insert(m->index(r, 0).data(DiffListModel::StoredKeyRole).toString());
    return out;
}

} // namespace

// README "Debugging a failed load, on the bundled demo", step by step, by keys and clicks.
TEST(WalkThroughTest, TheReadmeWalkThroughByKeysAndClicks)
{
    MainWindow w;
    w.resize(1366, 768);
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    w.activateWindow();
    CheckpointSession *s = w.session();

    // 1. The demo with the layout of its config.json (what `shardscope` with no argument opens):
    // it loads, every parameter filled, no mark in the tree asks for attention.
    w.openPath(kDemo);
    w.setConfigPath(kDemo + QStringLiteral("/config.json"));
    ASSERT_TRUE(waitFor([&] { return idleWithDiff(s); }));
    EXPECT_TRUE(
        QRegularExpression(QStringLiteral("^Load: loads, ([0-9,]+) of \\1 parameters filled"))
            .match(statusPart(w, "loadOutcome"))
            .hasMatch())
        << statusPart(w, "loadOutcome").toStdString();
    for (int mark = int(FirstAttentionMark); mark <= int(LoadMark::KeptAtInit); ++mark)
        EXPECT_EQ(w.treeModel()->markedLeaves(LoadMark(mark)), 0u) << "mark " << mark;

    // 2. The Load diff tab, its Rules menu, mla_down_proj off: the banner quotes what the strict
    // load raises and F8 steps through the unloadable parameters, each with where its data is
    // and the fix.
    auto *bottom = w.findChild<QTabWidget *>(QStringLiteral("bottomTabs"));
    ASSERT_NE(bottom, nullptr);
    clickTab(bottom, QStringLiteral("Load diff"));
    widgets::DiffPanel *panel = w.diffPanel();
    ASSERT_TRUE(panel->isVisible());
    auto *rules = panel->findChild<QToolButton *>(QStringLiteral("rules"));
    ASSERT_NE(rules, nullptr);
    const auto before = s->diff();
    clickInMenu(QStringLiteral("mla_down_proj"));
    QTest::mouseClick(rules, Qt::LeftButton);
    ASSERT_TRUE(waitFor([&] { return s->diff() != before && idleWithDiff(s); }));
    auto *banner = panel->findChild<QLabel *>(QStringLiteral("banner"));
    ASSERT_NE(banner, nullptr);
    ASSERT_EQ(s->diff()->outcome.action, LoadOutcome::Action::Raises)
        << "the strict load raises nothing: the case is not met";
    const QString raises = QString::fromStdString(s->diff()->outcome.message);
    ASSERT_FALSE(raises.isEmpty());
    EXPECT_TRUE(banner->text().contains(raises.left(40).toHtmlEscaped()) ||
                banner->text().contains(raises.left(40)))
        << banner->text().toStdString();
    auto *entries = panel->findChild<QTreeView *>(QStringLiteral("entries"));
    ASSERT_NE(entries, nullptr);
    auto *explanation = panel->findChild<QWidget *>(QStringLiteral("entryDetails"));
    ASSERT_NE(explanation, nullptr);
    std::set<QString> stepped;
    for (int i = 0; i < 12; ++i) {
        press(&w, Qt::Key_F8);
        const QModelIndex at = entries->currentIndex();
        ASSERT_TRUE(at.isValid());
        EXPECT_TRUE(at.data(DiffListModel::ProblemRole).toBool());
        stepped.insert(at.data(Qt::DisplayRole).toString());
        const QString fix = at.data(DiffListModel::FixRole).toString();
        EXPECT_FALSE(fix.isEmpty());
        EXPECT_EQ(w.detailsKey(), at.data(DiffListModel::StoredKeyRole).toString());
    }
    EXPECT_GE(stepped.size(), 10u) << "F8 did not step through the unloadable parameters";

    // 3. Partial load ticked, strictness ignore_all picked from its list by keys: the load no
    // longer raises and the banner counts the parameters silently kept at their initial values;
    // Problems only in the tree keeps exactly the stored keys holding their data.
    auto *partial = panel->findChild<QCheckBox *>(QStringLiteral("partialLoad"));
    ASSERT_NE(partial, nullptr);
    QTest::mouseClick(partial, Qt::LeftButton, {}, partial->rect().center());
    ASSERT_TRUE(waitFor([&] { return idleWithDiff(s) && !s->diff()->options.strictLoad; }));
    auto *strictness = panel->findChild<QComboBox *>(QStringLiteral("strictness"));
    ASSERT_NE(strictness, nullptr);
    strictness->setFocus();
    for (int i = 0;
         i < strictness->count() && strictness->currentText() != QStringLiteral("ignore_all"); ++i)
        press(strictness, Qt::Key_Down);
    ASSERT_EQ(strictness->currentText(), QStringLiteral("ignore_all"));
    ASSERT_TRUE(waitFor(
        [&] { return idleWithDiff(s) && s->diff()->options.strictness == Strictness::IgnoreAll; }));
    const size_t kept = s->diff()->outcome.keptAtInit.size();
    ASSERT_GT(kept, 0u);
    EXPECT_NE(s->diff()->outcome.action, LoadOutcome::Action::Raises);
    EXPECT_TRUE(banner->text().contains(
        QStringLiteral("%1 parameters silently keep their initial values").arg(kept)))
        << banner->text().toStdString();
    auto *filter = w.findChild<widgets::FilterBar *>();
    ASSERT_NE(filter, nullptr);
    QCheckBox *problemsOnly = nullptr;
    for (auto *box : filter->findChildren<QCheckBox *>())
        if (box->text().remove(QLatin1Char('&')) == QStringLiteral("Problems only"))
            problemsOnly = box;
    ASSERT_NE(problemsOnly, nullptr);
    QTest::mouseClick(problemsOnly, Qt::LeftButton, {}, problemsOnly->rect().center());
    ASSERT_TRUE(problemsOnly->isChecked());
    QCoreApplication::processEvents();
    auto *tree = w.findChild<widgets::CheckpointTreeView *>();
    ASSERT_NE(tree, nullptr);
    std::set<QString> shown;
    std::function<void(const QModelIndex &)> walk = [&](const QModelIndex &parent) {
        for (int r = 0; r < tree->model()->rowCount(parent); ++r) {
            const QModelIndex i = tree->model()->index(r, 0, parent);
            if (NodeKind(i.data(KindRole).toInt()) == NodeKind::Group) {
                walk(i);
                continue;
            }
            shown.insert(i.data(KeyRole).toString());
            EXPECT_EQ(LoadMark(i.data(LoadMarkRole).toInt()), LoadMark::KeptAtInit)
                << i.data(KeyRole).toString().toStdString();
        }
    };
    walk({});
    EXPECT_EQ(shown.size(), w.treeModel()->markedLeaves(LoadMark::KeptAtInit));
    EXPECT_GT(shown.size(), 0u);
    const std::set<QString> keptStored = keptInDiff(entries);
    for (const QString &key : keptStored)
        EXPECT_TRUE(shown.count(key)) << key.toStdString() << " is not in the tree";
    QTest::mouseClick(problemsOnly, Qt::LeftButton, {}, problemsOnly->rect().center());

    // 4. Ctrl+R: the verification finds the same parameters kept at their initial values; a row
    // clicked selects its stored key.
    press(&w, Qt::Key_R, Qt::ControlModifier);
    ASSERT_TRUE(waitFor([&] { return s->verification() && !s->isJobRunning(); }));
    auto *verifyView = w.verifyPanel()->findChild<QTreeView *>();
    ASSERT_NE(verifyView, nullptr);
    ASSERT_TRUE(verifyView->isVisible()) << "Ctrl+R did not show the verification";
    std::set<QString> keptVerified;
    for (int r = 0; r < verifyView->model()->rowCount(); ++r) {
        const QModelIndex i = verifyView->model()->index(r, 0);
        if (i.siblingAtColumn(VerifyTableModel::OutcomeColumn).data().toString() ==
            QStringLiteral("kept_initial_values"))
            keptVerified.insert(i.data(VerifyTableModel::SourceKeyRole).toString());
    }
    EXPECT_EQ(keptVerified.size(), kept);
    EXPECT_EQ(keptVerified, keptStored);
    const QModelIndex first = verifyView->model()->index(0, 0);
    verifyView->scrollTo(first);
    QTest::mouseClick(verifyView->viewport(), Qt::LeftButton, {},
                      verifyView->visualRect(first).center());
    EXPECT_EQ(w.detailsKey(), first.data(VerifyTableModel::SourceKeyRole).toString());

    // 5. Ctrl+E saves the report through the file dialog; Ctrl+Shift+C copies the command that
    // reproduces it, which runs once the window has closed.
    const QString folder = savedIn(QStringLiteral("walkthrough"));
    const QString report = folder + QStringLiteral("/report.md");
    typeIntoFileDialog(report);
    press(&w, Qt::Key_E, Qt::ControlModifier);
    ASSERT_TRUE(waitFor([&] { return QFileInfo(report).size() > 0 && !s->isJobRunning(); }))
        << "no report at " << report.toStdString();
    // The generated layout its reproduce line names lies beside it, and outlives the window.
    EXPECT_TRUE(QFileInfo::exists(report + QStringLiteral(".layout.json")));
    press(&w, Qt::Key_C, Qt::ControlModifier | Qt::ShiftModifier);
    const QString command = QApplication::clipboard()->text();
    ASSERT_TRUE(command.contains(QStringLiteral("shardscope-cli verify ")))
        << command.toStdString();
    w.close();
    // Pasted into a shell in a folder of its own: the verification fails as the window's did,
    // and the layout it generates goes into a folder of its own, not the one it was pasted in.
    QString said;
    EXPECT_EQ(runShell(command, folder, &said), 1) << command.toStdString() << "\n"
                                                   << said.toStdString();
    EXPECT_FALSE(QFileInfo::exists(folder + QStringLiteral("/layout.json")))
        << command.toStdString();
}

// File ▸ Open File… (Ctrl+Shift+O) with a file that is no checkpoint, typed into the dialog: the
// checkpoint shown stays with its title, tree and results; the status bar says the open failed
// and what is still shown; the failed path is not in Open Recent.
TEST(WalkThroughTest, AFailedOpenFromTheDialog)
{
    const QString junk = savedIn(QStringLiteral("failedopen")) + QStringLiteral("/junk.pt");
    {
        QFile f(junk);
        ASSERT_TRUE(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(4096, '\x03'));
    }
    MainWindow w;
    w.resize(1366, 768);
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    w.activateWindow();
    CheckpointSession *s = w.session();
    w.openPath(kDemo);
    w.setConfigPath(kDemo + QStringLiteral("/config.json"));
    ASSERT_TRUE(waitFor([&] { return idleWithDiff(s); }));
    const QString title = w.windowTitle();
    const IndexSnapshot shown = s->index();
    const int rows = w.treeModel()->rowCount();
    const QString outcome = statusPart(w, "loadOutcome");

    typeIntoFileDialog(junk);
    press(&w, Qt::Key_O, Qt::ControlModifier | Qt::ShiftModifier);
    ASSERT_TRUE(waitFor([&] {
        return statusPart(w, "message").contains(QStringLiteral("Cannot open junk.pt"));
    })) << statusPart(w, "message").toStdString();
    QCoreApplication::processEvents();
    EXPECT_EQ(w.windowTitle(), title);
    EXPECT_TRUE(s->index() == shown);
    EXPECT_TRUE(w.treeModel()->checkpointIndex() == shown);
    EXPECT_EQ(w.treeModel()->rowCount(), rows);
    EXPECT_TRUE(s->diff());
    EXPECT_EQ(statusPart(w, "loadOutcome"), outcome);
    EXPECT_TRUE(statusPart(w, "message").contains(QStringLiteral("still showing")))
        << statusPart(w, "message").toStdString();
    EXPECT_FALSE(MainWindow::recentFiles().contains(QFileInfo(junk).absoluteFilePath()));
}

// File ▸ Save Repaired Checkpoint… (Ctrl+Shift+S) into a folder typed into the dialog: the
// window's message gives a "Check it with:" command that still runs, and passes, once the window
// has closed (its temporary folder gone).
TEST(WalkThroughTest, TheRepairsCheckCommandRunsAfterTheWindowCloses)
{
    const QString fixed = savedIn(QStringLiteral("repair")) + QStringLiteral("/fixed");
    QString said, windowFolder;
    {
        MainWindow w;
        w.resize(1366, 768);
        w.show();
        ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
        w.activateWindow();
        CheckpointSession *s = w.session();
        DiffOptions options;
        options.disabledRules = {"mla_down_proj"};
        options.strictLoad = false;
        options.strictness = Strictness::IgnoreAll;
        w.setDiffOptions(options);
        w.openPath(kDemo);
        w.setConfigPath(kDemo + QStringLiteral("/config.json"));
        ASSERT_TRUE(
            waitFor([&] { return idleWithDiff(s) && !s->diff()->outcome.keptAtInit.empty(); }));
        ASSERT_TRUE(s->layoutIsGenerated());
        windowFolder = QFileInfo(s->layoutPath()).absolutePath();

        typeIntoFileDialog(fixed);
        press(&w, Qt::Key_S, Qt::ControlModifier | Qt::ShiftModifier);
        QMessageBox *box = nullptr;
        ASSERT_TRUE(waitFor([&] {
            for (QWidget *top : QApplication::topLevelWidgets())
                if (auto *b = qobject_cast<QMessageBox *>(top); b && b->isVisible())
                    box = b;
            return box != nullptr && !s->isJobRunning();
        })) << "no message after the repair";
        said = box->text();
        QTest::keyClick(box, Qt::Key_Return);
        w.close();
    }
    QCoreApplication::processEvents();
    const QString marker = QStringLiteral("Check it with: ");
    ASSERT_TRUE(said.contains(marker)) << said.toStdString();
    const QString check =
        said.mid(said.indexOf(marker) + marker.size()).section(QLatin1Char('\n'), 0, 0);
    EXPECT_FALSE(check.contains(windowFolder))
        << "names the window's temporary layout: " << check.toStdString();
    QString out;
    EXPECT_EQ(runCli(QProcess::splitCommand(check), &out), 0) << check.toStdString() << "\n"
                                                              << out.toStdString();
}
