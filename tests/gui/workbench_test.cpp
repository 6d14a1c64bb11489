// SPDX-License-Identifier: MIT
// The window end to end, as a user debugging a failed load drives it: the bundled demo with its
// layout, the MLA handler switched off, the verification, a comparison with a copy in which
// real torch changed one tensor, and the exported reports against the CLI's.
#include "mainwindow.h"
#include "testwait.h"

#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "model/difflistmodel.h"
#include "model/loadmarks.h"
#include "model/valuediffmodel.h"
#include "model/verifytablemodel.h"
#include "widgets/comparepanel.h"
#include "widgets/diffpanel.h"
#include "widgets/verifypanel.h"

#include <QAbstractItemModelTester>
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMenu>
#include <QProcess>
#include <QTemporaryDir>
#include <QToolButton>
#include <QTreeView>

#include <gtest/gtest.h>

#include <algorithm>
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

// Runs the CLI as `shardscope-cli ARGS…` (argv[0] as the window writes it, so that the
// report's reproduce line is the same); its exit code.
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

// Exports the window's report to `path`, then has the CLI write the same report from the
// arguments the window names, and compares the two byte for byte.
void expectReportEqualsCli(MainWindow &w, const QString &path)
{
    CheckpointSession *s = w.session();
    bool ended = false, ok = false;
    auto c = QObject::connect(s, &CheckpointSession::jobEnded,
                              [&](const JobInfo &job, bool good, const QString &) {
                                  if (job.kind != JobKind::Export)
                                      return;
                                  ended = true;
                                  ok = good;
                              });
    const QStringList args = w.reportArguments(path);
    w.exportReport(path);
    ASSERT_TRUE(waitFor([&] { return ended; }));
    QObject::disconnect(c);
    ASSERT_TRUE(ok);
    const QString fromWindow = readText(path);
    ASSERT_FALSE(fromWindow.isEmpty());
    ASSERT_TRUE(QFile::rename(path, path + QStringLiteral(".window")));
    const int rc = runCli(args);
    EXPECT_TRUE(rc == 0 || rc == 1) << rc;
    EXPECT_EQ(fromWindow.toStdString(), readText(path).toStdString())
        << args.join(QLatin1Char(' ')).toStdString();
}

} // namespace

TEST(WorkbenchTest, DebuggingAFailedLoad)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    CheckpointSession *s = w.session();
    CheckpointTreeModel *tree = w.treeModel();
    QAbstractItemModelTester treeTester(tree,
                                        QAbstractItemModelTester::FailureReportingMode::Fatal);

    // 1. The demo with the layout of its config: a clean load, nothing marked in the tree.
    w.openPath(demo);
    w.setConfigPath(demo + QStringLiteral("/config.json"));
    ASSERT_TRUE(waitFor([&] { return s->diff() && !s->isJobRunning(); }));
    DiffSnapshot clean = s->diff();
    EXPECT_EQ(clean->loadableModel, clean->expectedModel);
    EXPECT_TRUE(clean->outcome.keptAtInit.empty());
    for (LoadMark m : {LoadMark::Unconsumed, LoadMark::Problem, LoadMark::Mismatch,
                       LoadMark::Unreadable, LoadMark::KeptAtInit})
        EXPECT_EQ(tree->markedLeaves(m), 0u) << int(m);
    EXPECT_GT(tree->markedLeaves(LoadMark::Loaded), 0u);

    // 2. Megatron's MLA handler switched off, through the panel's own controls, under a partial
    // load that ignores everything: the ten fused MLA parameters silently keep their initial
    // values, and the tree marks the stored keys holding their data.
    widgets::DiffPanel *panel = w.diffPanel();
    auto *rules = panel->findChild<QToolButton *>(QStringLiteral("rules"));
    ASSERT_NE(rules, nullptr);
    QAction *mla = nullptr;
    for (QAction *a : rules->menu()->actions())
        if (a->text() == QStringLiteral("mla_down_proj"))
            mla = a;
    ASSERT_NE(mla, nullptr);
    mla->setChecked(false);
    panel->findChild<QCheckBox *>(QStringLiteral("partialLoad"))->setChecked(true);
    auto *strictness = panel->findChild<QComboBox *>(QStringLiteral("strictness"));
    strictness->setCurrentText(QStringLiteral("ignore_all"));
    ASSERT_TRUE(waitFor([&] {
        const DiffSnapshot d = s->diff();
        return d && !s->isJobRunning() && d->options.strictness == Strictness::IgnoreAll &&
               !d->options.strictLoad && d->options.disabledRules.size() == 1;
    }));
    const DiffSnapshot off = s->diff();
    const std::set<std::string> kept(off->outcome.keptAtInit.begin(),
                                     off->outcome.keptAtInit.end());
    ASSERT_EQ(kept.size(), 10u);
    for (const std::string &name : kept)
        EXPECT_NE(name.find("linear_qkv_down_proj"), std::string::npos) << name;
    std::set<std::string> holding; // stored keys that hold the kept parameters' data and state
    for (const DiffEntry &e : off->entries)
        if (kept.count(e.param))
            holding.insert(e.unreadKeys.begin(), e.unreadKeys.end());
    EXPECT_FALSE(holding.empty());
    EXPECT_EQ(tree->markedLeaves(LoadMark::KeptAtInit), holding.size());
    for (const std::string &key : holding) {
        const QModelIndex at = tree->indexForKey(QString::fromStdString(key));
        ASSERT_TRUE(at.isValid()) << key;
        EXPECT_EQ(LoadMark(at.data(LoadMarkRole).toInt()), LoadMark::KeptAtInit) << key;
        // Every ancestor shows the worst mark below it.
        for (QModelIndex p = at.parent(); p.isValid(); p = p.parent())
            EXPECT_EQ(LoadMark(p.data(LoadMarkRole).toInt()), LoadMark::KeptAtInit);
    }
    int listed = 0;
    DiffListModel *list = panel->listModel();
    for (int r = 0; r < list->rowCount(); ++r)
        listed += list->index(r, 0).data(DiffListModel::KeptAtInitRole).toBool();
    EXPECT_EQ(listed, 10);

    // 3. The verification finds the same set, and its table and the tree select each other.
    w.verifyLoad();
    ASSERT_TRUE(waitFor([&] { return s->verification() && !s->isJobRunning(); }));
    std::set<std::string> keptByVerify;
    for (const ParamCheck &p : s->verification()->result.params)
        if (p.outcome == ParamCheck::Outcome::KeptInitial)
            keptByVerify.insert(p.name);
    EXPECT_EQ(keptByVerify, kept);
    auto *summary = w.verifyPanel()->findChild<QLabel *>(QStringLiteral("summary"));
    ASSERT_NE(summary, nullptr);
    const int world = s->verification()->result.world;
    EXPECT_TRUE(summary->text().contains(world == 1 ? QStringLiteral(" · 1 rank · ")
                                                    : QStringLiteral(" · %1 ranks · ").arg(world)))
        << summary->text().toStdString();
    VerifyTableModel *table = w.verifyPanel()->tableModel();
    QAbstractItemModelTester tableTester(table,
                                         QAbstractItemModelTester::FailureReportingMode::Fatal);
    for (size_t r = 0; r < kept.size(); ++r) // worst first
        EXPECT_TRUE(kept.count(
            table->index(int(r), 0).data(VerifyTableModel::NameRole).toString().toStdString()));
    auto *verifyView = w.verifyPanel()->findChild<QTreeView *>();
    ASSERT_NE(verifyView, nullptr);
    int linked = -1;
    for (int r = 0; r < table->rowCount() && linked < 0; ++r)
        if (!table->index(r, 0).data(VerifyTableModel::SourceKeyRole).toString().isEmpty())
            linked = r;
    ASSERT_GE(linked, 0);
    const QString name = table->index(linked, 0).data(VerifyTableModel::NameRole).toString();
    const QString key = table->index(linked, 0).data(VerifyTableModel::SourceKeyRole).toString();
    verifyView->setCurrentIndex(verifyView->model()->index(linked, 0));
    EXPECT_EQ(w.detailsKey(), key);
    verifyView->setCurrentIndex({});
    w.verifyPanel()->selectStoredKey(key);
    EXPECT_EQ(verifyView->currentIndex().data(VerifyTableModel::NameRole).toString(), name);

    // 4. Compared with a copy in which real torch changed one tensor: exactly that tensor
    // differs, first in the list.
    const QString changed = QStringLiteral(SHARDSCOPE_TEST_CHANGED);
    const QJsonObject record =
        QJsonDocument::fromJson(readText(changed + QStringLiteral(".json")).toUtf8()).object();
    const std::string changedKey = record.value(QStringLiteral("key")).toString().toStdString();
    ASSERT_FALSE(changedKey.empty());
    w.setComparePath(changed);
    ASSERT_TRUE(waitFor([&] { return s->comparison() && !s->isJobRunning(); }));
    EXPECT_TRUE(s->comparison()->clean()); // the same keys: only the values can tell
    w.compareValues();
    ASSERT_TRUE(waitFor([&] { return s->values() && !s->isJobRunning(); }));
    const ValuesSnapshot values = s->values();
    std::vector<const TensorValueDiff *> different;
    for (const TensorValueDiff &t : values->tensors)
        if (t.verdict == TensorValueDiff::Verdict::Different)
            different.push_back(&t);
    ASSERT_EQ(different.size(), 1u);
    const auto &keysA = different.front()->keysA;
    EXPECT_NE(std::find(keysA.begin(), keysA.end(), changedKey), keysA.end());
    EXPECT_EQ(different.front()->differing, 1);
    ValueDiffModel *valueModel = w.comparePanel()->valuesModel();
    QAbstractItemModelTester valueTester(valueModel,
                                         QAbstractItemModelTester::FailureReportingMode::Fatal);
    EXPECT_TRUE(valueModel->index(0, 0).data(ValueDiffModel::DifferentRole).toBool());
    // With the MLA rule still off, the fused parameters (and their state) cannot be assembled
    // on either side; but each stored key that holds their data is stored under the same name
    // on both, and is compared as stored: nothing is left out, and the summary says so.
    for (const TensorValueDiff &t : values->tensors)
        EXPECT_NE(t.verdict, TensorValueDiff::Verdict::NotCompared) << t.name << ": " << t.why;
    for (const std::string &held : holding) {
        const auto it = std::find_if(values->tensors.begin(), values->tensors.end(),
                                     [&held](const TensorValueDiff &t) { return t.name == held; });
        ASSERT_NE(it, values->tensors.end()) << held;
        EXPECT_EQ(it->verdict, TensorValueDiff::Verdict::Identical) << held;
        EXPECT_EQ(it->keysA, std::vector<std::string>{held});
    }
    auto *valuesSummary = w.comparePanel()->findChild<QLabel *>(QStringLiteral("valuesSummary"));
    ASSERT_NE(valuesSummary, nullptr);
    EXPECT_TRUE(valuesSummary->text().contains(
        QStringLiteral("all %1 compared").arg(values->tensors.size())))
        << valuesSummary->text().toStdString();

    // 5. The exported reports are the CLI's for the same options: the comparison (shown now)
    // and the load diff.
    QTemporaryDir out;
    ASSERT_TRUE(out.isValid());
    expectReportEqualsCli(w, out.filePath(QStringLiteral("compare.json")));
    w.showPanel(QStringLiteral("diff"));
    expectReportEqualsCli(w, out.filePath(QStringLiteral("diff.md")));
    expectReportEqualsCli(w, out.filePath(QStringLiteral("diff.html")));
    EXPECT_TRUE(readText(out.filePath(QStringLiteral("diff.md")))
                    .contains(QStringLiteral("linear_qkv_down_proj")));
}

// `report --against` without --values (the structure alone) once aborted in the CLI: the window's
// Markdown, HTML and JSON exports for the demo against itself and against the changed copy must
// be what the CLI writes for the same arguments.
TEST(WorkbenchTest, StructureReportsEqualTheCli)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    const QString changed = QStringLiteral(SHARDSCOPE_TEST_CHANGED);
    QTemporaryDir out;
    ASSERT_TRUE(out.isValid());
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    CheckpointSession *s = w.session();
    w.openPath(demo);
    ASSERT_TRUE(waitFor([&] { return s->index() && !s->isJobRunning(); }));
    for (const QString &second : {demo, changed}) {
        SCOPED_TRACE(second.toStdString());
        w.setComparePath(second);
        ASSERT_TRUE(waitFor(
            [&] { return s->comparison() && !s->isJobRunning() && s->comparePath() == second; }));
        w.showPanel(QStringLiteral("compare"));
        ASSERT_FALSE(s->values());
        const QString stem = second == demo ? QStringLiteral("self") : QStringLiteral("changed");
        for (const char *ext : {"md", "html", "json"})
            expectReportEqualsCli(w, out.filePath(stem + QStringLiteral(".") + QLatin1String(ext)));
        const QJsonObject report =
            QJsonDocument::fromJson(readText(out.filePath(stem + QStringLiteral(".json"))).toUtf8())
                .object();
        EXPECT_FALSE(report.isEmpty());
    }
}

// File ▸ Save Repaired Checkpoint with the MLA handler switched off in the panel: the window's
// repair is the CLI's (the same .metadata byte for byte, from the command the manifest records),
// and the repaired checkpoint, opened in the window, loads N of N under the same options.
TEST(WorkbenchTest, SavesARepairedCheckpointTheCliWould)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    QTemporaryDir out;
    ASSERT_TRUE(out.isValid());
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    CheckpointSession *s = w.session();
    w.openPath(demo);
    w.setConfigPath(demo + QStringLiteral("/config.json"));
    ASSERT_TRUE(waitFor([&] { return s->diff() && !s->isJobRunning(); }));
    auto *rules = w.diffPanel()->findChild<QToolButton *>(QStringLiteral("rules"));
    ASSERT_NE(rules, nullptr);
    for (QAction *a : rules->menu()->actions())
        if (a->text() == QStringLiteral("mla_down_proj"))
            a->setChecked(false);
    ASSERT_TRUE(waitFor([&] {
        return s->diff() && !s->isJobRunning() && s->diff()->options.disabledRules.size() == 1;
    }));
    ASSERT_FALSE(s->diff()->passes());

    const QString fixed = out.filePath(QStringLiteral("fixed"));
    QString summary;
    auto c = QObject::connect(s, &CheckpointSession::repaired,
                              [&](const QString &text) { summary = text; });
    w.saveRepaired(fixed);
    ASSERT_TRUE(waitFor([&] { return !summary.isEmpty() && !s->isJobRunning(); }));
    QObject::disconnect(c);
    EXPECT_TRUE(summary.contains(QStringLiteral("concatenate"))) << summary.toStdString();
    EXPECT_TRUE(summary.contains(QStringLiteral("97 of 97"))) << summary.toStdString();

    // The CLI from the command the manifest records, into another directory.
    const QJsonObject manifest =
        QJsonDocument::fromJson(readText(fixed + QStringLiteral("/shardscope-fix.json")).toUtf8())
            .object();
    QStringList args = QProcess::splitCommand(manifest.value(QStringLiteral("command")).toString());
    ASSERT_GE(args.size(), 4);
    const int o = int(args.indexOf(QStringLiteral("-o")));
    ASSERT_GT(o, 0);
    const QString cli = out.filePath(QStringLiteral("cli"));
    args[o + 1] = cli;
    EXPECT_EQ(runCli(args), 0);
    const QString iter = QStringLiteral("/iter_0000020/.metadata");
    auto bytes = [](const QString &path) {
        QFile f(path);
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    const QByteArray fromWindow = bytes(fixed + iter), fromCli = bytes(cli + iter);
    EXPECT_FALSE(fromWindow.isEmpty());
    EXPECT_TRUE(fromWindow == fromCli);
    EXPECT_TRUE(s->diff()->options.disabledRules.size() == 1);

    // Opened in the window with the same rules: the load fills everything.
    w.openPath(fixed);
    ASSERT_TRUE(waitFor([&] { return s->diff() && !s->isJobRunning() && s->path() == fixed; }));
    EXPECT_TRUE(s->diff()->passes());
    EXPECT_EQ(s->diff()->loadableModel, s->diff()->expectedModel);
}
