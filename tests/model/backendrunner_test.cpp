// SPDX-License-Identifier: MIT
// The executor (BackendRunner) on its own, and the session over it against real checkpoints
// written by the pinned torch (SHARDSCOPE_PYTHON) and the bundled demo.
#include "model/backendrunner.h"
#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "model/difffilterproxy.h"
#include "model/difflistmodel.h"

#include <QAbstractItemModelTester>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>

using namespace shardscope;
using namespace shardscope::model;

namespace {

constexpr int Timeout = 60'000;

QString pythonPath()
{
    QString python = qEnvironmentVariable("SHARDSCOPE_PYTHON");
#ifdef SHARDSCOPE_TEST_PYTHON
    if (python.isEmpty())
        python = QStringLiteral(SHARDSCOPE_TEST_PYTHON);
#endif
    return python;
}

// Runs `script` with the checkpoint path as argv[1]; returns an error text, empty on success.
QString runPython(const QString &script, const QString &path)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(pythonPath(), {QStringLiteral("-c"), script, path});
    if (!p.waitForFinished(120'000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        return QStringLiteral("python failed: ") + QString::fromLocal8Bit(p.readAll());
    return {};
}

// The bundled demo's layout, written into `dir`; empty on failure.
QString writeDemoLayout(const QTemporaryDir &dir)
{
    auto layout = layoutFromConfig(
        QFile::encodeName(QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR "/config.json")).toStdString(),
        {});
    const QString path = dir.filePath(QStringLiteral("layout.json"));
    QFile out(path);
    if (!layout || !out.open(QIODevice::WriteOnly))
        return {};
    out.write(QByteArray::fromStdString(layoutToJson(*layout)));
    return path;
}

class BackendRunnerTest : public ::testing::Test
{
protected:
    static void SetUpTestSuite()
    {
        const QString python = pythonPath();
        if (python.isEmpty() || !QFileInfo(python).isExecutable()) {
            s_skip = QStringLiteral("SHARDSCOPE_PYTHON is not set to a python with torch");
            return;
        }
        s_dir = new QTemporaryDir;
        s_path = s_dir->filePath(QStringLiteral("tiny.pt"));
        const QString error = runPython(
            QStringLiteral(
                "import sys, torch\n"
                "torch.save({'a': torch.arange(6.).reshape(2, 3),\n"
                "            'b': torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16),\n"
                "            'step': 7}, sys.argv[1])\n"),
            s_path);
        if (!error.isEmpty())
            s_skip = error;
    }
    static void TearDownTestSuite()
    {
        delete s_dir;
        s_dir = nullptr;
    }
    void SetUp() override
    {
        if (!s_skip.isEmpty())
            GTEST_SKIP() << s_skip.toStdString();
    }

    // Opens the fixture and returns the snapshot (asserting in the caller's test).
    IndexSnapshot open(CheckpointSession &session)
    {
        QSignalSpy opened(&session, &CheckpointSession::opened);
        QSignalSpy failed(&session, &CheckpointSession::openFailed);
        session.open(s_path);
        if (!opened.wait(Timeout))
            return nullptr;
        EXPECT_EQ(failed.count(), 0);
        return opened.at(0).at(0).value<IndexSnapshot>();
    }

    static inline QTemporaryDir *s_dir = nullptr;
    static inline QString s_path;
    static inline QString s_skip;
};

} // namespace

// ---------------------------------------------------------------- the executor

namespace {

// Runs the owner's event loop until `done` or the time-out; whether `done` held.
bool spin(const std::function<bool()> &done, int ms = Timeout)
{
    QElapsedTimer t;
    t.start();
    while (!done()) {
        if (t.elapsed() > ms)
            return false;
        QTest::qWait(2);
    }
    return true;
}

// A job that runs until cancelled, as a long verification would, reporting every millisecond.
auto endless(std::atomic<bool> &started, std::atomic<int> &steps)
{
    return [&started, &steps](const JobControl &control) -> Result<int> {
        started = true;
        for (uint64_t i = 0;; ++i) {
            if (!control.report({"verify", i % 1000 + 1, 1001}))
                return makeError(Error::Code::Cancelled, "cancelled");
            ++steps;
            QThread::msleep(1);
        }
    };
}

} // namespace

// One typed path: the work's value reaches `done` on the owner's thread, once, and the job is
// announced once each (started, ended), in that order; a failure ends it with the error's one
// line and never calls `done`.
TEST(BackendRunner, DeliversEachResultOnceOnTheOwnersThread)
{
    BackendRunner runner;
    QThread *owner = QThread::currentThread();
    QThread *workedOn = nullptr, *doneOn = nullptr;
    std::vector<std::string> events;
    QObject::connect(&runner, &BackendRunner::jobStarted, [&](const JobInfo &job) {
        events.push_back("started " + job.title.toStdString());
    });
    QObject::connect(&runner, &BackendRunner::jobEnded,
                     [&](const JobInfo &job, bool ok, const QString &message) {
                         events.push_back("ended " + job.title.toStdString() +
                                          (ok ? " ok " : " failed ") + message.toStdString());
                     });
    int delivered = 0, value = 0;
    const quint64 id = runner.start<int>(
        {JobKind::Diff, QStringLiteral("six"), BackendRunner::Lane::Long, {}},
        [&](const JobControl &) -> Result<int> {
            workedOn = QThread::currentThread();
            return 6;
        },
        [&](int v) {
            doneOn = QThread::currentThread();
            ++delivered;
            value = v;
            events.push_back("done");
        });
    EXPECT_GT(id, 0u);
    EXPECT_TRUE(runner.isBusy());
    ASSERT_TRUE(spin([&] { return !runner.isBusy(); }));
    QTest::qWait(20); // anything queued after the end would arrive now
    EXPECT_EQ(delivered, 1);
    EXPECT_EQ(value, 6);
    EXPECT_NE(workedOn, owner);
    EXPECT_EQ(doneOn, owner);
    EXPECT_EQ(events, (std::vector<std::string>{"started six", "done", "ended six ok Done"}));

    events.clear();
    runner.start<int>(
        {JobKind::Diff, QStringLiteral("bad"), BackendRunner::Lane::Long, {}},
        [](const JobControl &) -> Result<int> {
            return makeError(Error::Code::Format, "no such thing").inFile("x.json");
        },
        [&](int) { ++delivered; });
    ASSERT_TRUE(spin([&] { return !runner.isBusy(); }));
    EXPECT_EQ(delivered, 1);
    EXPECT_EQ(events,
              (std::vector<std::string>{"started bad", "ended bad failed x.json: no such thing"}));
}

// A minutes-long job on the long lane must not hold up the quick lane; its throttled progress
// reaches the owner's thread with the time left, and a cancel ends it within half a second,
// without a result.
TEST(BackendRunner, LongJobRunsBesideQuickOnesAndCancels)
{
    BackendRunner runner;
    std::atomic<bool> started{false};
    std::atomic<int> steps{0};
    QSignalSpy progress(&runner, &BackendRunner::jobProgress);
    QSignalSpy ended(&runner, &BackendRunner::jobEnded);
    QThread *owner = QThread::currentThread();
    bool offThread = false;
    QObject::connect(&runner, &BackendRunner::jobProgress, &runner,
                     [&] { offThread = offThread || QThread::currentThread() != owner; });
    bool delivered = false;
    const quint64 id = runner.start<int>({JobKind::Verify, QStringLiteral("endless")},
                                         endless(started, steps), [&](int) { delivered = true; });
    ASSERT_TRUE(spin([&] { return started.load(); }));

    bool quick = false;
    runner.start<int>(
        {JobKind::Details, QStringLiteral("quick"), BackendRunner::Lane::Quick, {}},
        [](const JobControl &) -> Result<int> { return 1; }, [&](int) { quick = true; });
    ASSERT_TRUE(spin([&] { return quick; })) << "the quick lane waited for the long job";

    // Throttled: a report every millisecond reaches the owner at most ten times a second.
    const int before = progress.count();
    QElapsedTimer window;
    window.start();
    QTest::qWait(600);
    const int reported = progress.count() - before;
    EXPECT_GE(reported, 1);
    EXPECT_LE(reported, window.elapsed() / 100 + 2) << steps.load() << " steps";
    EXPECT_FALSE(offThread);
    EXPECT_EQ(progress.last().at(0).value<JobInfo>().id, id);
    EXPECT_EQ(progress.last().at(1).toString(), QStringLiteral("verify"));
    EXPECT_GE(progress.last().at(3).toDouble(), 0.0) << "no time left shown";

    QElapsedTimer cancelled;
    cancelled.start();
    runner.cancel(id);
    ASSERT_TRUE(spin([&] { return !runner.isBusy(); }));
    EXPECT_LT(cancelled.elapsed(), 500);
    ASSERT_GE(ended.count(), 2);
    EXPECT_EQ(ended.last().at(0).value<JobInfo>().id, id);
    EXPECT_FALSE(ended.last().at(1).toBool());
    EXPECT_EQ(ended.last().at(2).toString(), jobCancelledText());
    EXPECT_FALSE(delivered);
}

// A stage whose work is all done while the job runs on shows busy, never a bar stuck at 100%.
TEST(BackendRunner, AStageDoneWhileTheJobRunsOnShowsBusy)
{
    BackendRunner runner;
    QSignalSpy progress(&runner, &BackendRunner::jobProgress);
    runner.start<int>(
        {JobKind::Diff, QStringLiteral("diff")},
        [](const JobControl &control) -> Result<int> {
            control.report({"diff", 5, 10});
            QThread::msleep(150);
            control.report({"diff", 10, 10}); // all rows diffed; the marks follow
            QThread::msleep(300);
            return 0;
        },
        [](int) {});
    ASSERT_TRUE(spin([&] { return !runner.isBusy(); }));
    ASSERT_GE(progress.count(), 2);
    EXPECT_EQ(progress.at(0).at(2).toInt(), 500);
    EXPECT_EQ(progress.last().at(2).toInt(), -1);
    EXPECT_LT(progress.last().at(3).toDouble(), 0.0);
}

// A queued job cancelled (or replaced by a newer one with its tag) ends at once, without waiting
// for the running one, and its work never runs: a burst of requests computes only the last.
TEST(BackendRunner, QueuedJobsEndAtOnceWhenCancelledOrReplaced)
{
    BackendRunner runner;
    std::atomic<bool> started{false};
    std::atomic<int> steps{0};
    const quint64 blocker = runner.start<int>({JobKind::Verify, QStringLiteral("blocker")},
                                              endless(started, steps), [](int) {});
    ASSERT_TRUE(spin([&] { return started.load(); }));
    QSignalSpy ended(&runner, &BackendRunner::jobEnded);
    std::atomic<int> ran{0};
    std::vector<int> delivered;
    auto job = [&](int n) {
        return runner.start<int>(
            {JobKind::Details, QString::number(n), BackendRunner::Lane::Long, QStringLiteral("d")},
            [&ran, n](const JobControl &) -> Result<int> {
                ++ran;
                return n;
            },
            [&delivered](int v) { delivered.push_back(v); });
    };
    job(1);
    EXPECT_EQ(ended.count(), 0);
    job(2); // replaces 1, which ends now
    ASSERT_EQ(ended.count(), 1);
    EXPECT_EQ(ended.last().at(0).value<JobInfo>().title, QStringLiteral("1"));
    EXPECT_EQ(ended.last().at(2).toString(), jobCancelledText());
    const quint64 three = runner.start<int>(
        {JobKind::Export, QStringLiteral("3")},
        [&ran](const JobControl &) -> Result<int> {
            ++ran;
            return 3;
        },
        [&delivered](int v) { delivered.push_back(v); });
    runner.cancel(three); // queued: it ends here, not after the blocker
    ASSERT_EQ(ended.count(), 2);
    EXPECT_EQ(ended.last().at(0).value<JobInfo>().id, three);
    runner.cancel(blocker);
    ASSERT_TRUE(spin([&] { return !runner.isBusy(); }));
    EXPECT_EQ(ran.load(), 1);
    EXPECT_EQ(delivered, std::vector<int>{2});
}

// ---------------------------------------------------------------- the session

TEST_F(BackendRunnerTest, OpensAndComputesTensorDetails)
{
    CheckpointSession session;
    const IndexSnapshot index = open(session);
    ASSERT_TRUE(index);
    EXPECT_EQ(index->format, Format::TorchSave);
    ASSERT_NE(index->findTensor("a"), nullptr);
    EXPECT_EQ(session.path(), s_path);
    EXPECT_TRUE(session.openingPath().isEmpty());

    // The snapshot feeds the tree model directly.
    CheckpointTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setIndex(index);
    ASSERT_TRUE(model.indexForKey(QStringLiteral("a")).isValid());

    QSignalSpy ready(&session, &CheckpointSession::tensorDetailsReady);
    session.requestTensorDetails(QStringLiteral("a"));
    ASSERT_TRUE(ready.wait(Timeout));
    ASSERT_EQ(ready.count(), 1);
    const auto details = ready.at(0).at(0).value<TensorDetails>();
    EXPECT_EQ(details.key, QStringLiteral("a"));
    ASSERT_TRUE(details.ok()) << details.error.toStdString();
    ASSERT_TRUE(details.hasStats) << details.statsError.toStdString();
    EXPECT_EQ(details.stats.count, 6);
    EXPECT_EQ(details.stats.min, 0.0);
    EXPECT_EQ(details.stats.max, 5.0);
    EXPECT_DOUBLE_EQ(details.stats.mean, 2.5);
    EXPECT_EQ(details.sha256.size(), 64);
    ASSERT_EQ(details.histogram.size(), size_t(HistogramBins));
    EXPECT_EQ(std::accumulate(details.histogram.begin(), details.histogram.end(), uint64_t(0)), 6u);
    EXPECT_EQ(details.histogram.front(), 1u);
    EXPECT_EQ(details.histogram.back(), 1u);
    EXPECT_EQ(details.histogramMin, 0.0);
    EXPECT_EQ(details.histogramMax, 5.0);

    // bfloat16 goes through the same path.
    session.requestTensorDetails(QStringLiteral("b"));
    ASSERT_TRUE(ready.wait(Timeout));
    const auto b = ready.at(1).at(0).value<TensorDetails>();
    ASSERT_TRUE(b.hasStats);
    EXPECT_EQ(b.stats.min, -2.0);
    EXPECT_EQ(b.stats.max, 3.25);
}

TEST_F(BackendRunnerTest, NewerDetailsRequestWins)
{
    CheckpointSession session;
    ASSERT_TRUE(open(session));
    QSignalSpy ready(&session, &CheckpointSession::tensorDetailsReady);
    session.requestTensorDetails(QStringLiteral("a"));
    session.requestTensorDetails(QStringLiteral("b"));
    session.requestTensorDetails(QStringLiteral("a"));
    ASSERT_TRUE(ready.wait(Timeout));
    QTest::qWait(100);
    // Older requests are replaced in the queue or cancelled: only the last one answers.
    ASSERT_EQ(ready.count(), 1);
    EXPECT_EQ(ready.at(0).at(0).value<TensorDetails>().key, QStringLiteral("a"));
}

TEST_F(BackendRunnerTest, ReportsMissingTensorsAndDecodesObjects)
{
    CheckpointSession session;
    ASSERT_TRUE(open(session));
    QSignalSpy ready(&session, &CheckpointSession::tensorDetailsReady);
    session.requestTensorDetails(QStringLiteral("nope"));
    ASSERT_TRUE(ready.wait(Timeout));
    EXPECT_FALSE(ready.at(0).at(0).value<TensorDetails>().ok());

    QSignalSpy object(&session, &CheckpointSession::objectReady);
    session.requestObject(QStringLiteral("step"));
    ASSERT_TRUE(object.wait(Timeout));
    const auto details = object.at(0).at(0).value<ObjectDetails>();
    ASSERT_TRUE(details.ok()) << details.error.toStdString();
    EXPECT_EQ(details.text, QStringLiteral("7"));
}

// A file in the place of `.metadata` that is no pickle says it is not DCP metadata, before what
// the decoder tripped on.
TEST(CheckpointSessionTest, ARandomMetadataSaysItIsNotDcp)
{
    QTemporaryDir dir;
    QFile f(dir.filePath(QStringLiteral(".metadata")));
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(QByteArray("\x03\x9a\x11random bytes, as a copy gone wrong leaves them", 48));
    f.close();
    CheckpointSession session;
    QSignalSpy failed(&session, &CheckpointSession::openFailed);
    session.open(dir.path());
    ASSERT_TRUE(failed.wait(Timeout));
    const QString error = failed.at(0).at(1).toString();
    EXPECT_TRUE(error.contains(QStringLiteral("not DCP metadata"))) << error.toStdString();
    EXPECT_TRUE(error.contains(QStringLiteral(".metadata"))) << error.toStdString();
}

TEST_F(BackendRunnerTest, OpenFailureIsOneLine)
{
    CheckpointSession session;
    QSignalSpy failed(&session, &CheckpointSession::openFailed);
    const QString missing = QDir(s_dir->path()).filePath(QStringLiteral("missing.pt"));
    session.open(missing);
    ASSERT_TRUE(failed.wait(Timeout));
    EXPECT_EQ(failed.at(0).at(0).toString(), missing);
    const QString error = failed.at(0).at(1).toString();
    EXPECT_FALSE(error.isEmpty());
    EXPECT_FALSE(error.contains(QLatin1Char('\n')));
    EXPECT_TRUE(session.openingPath().isEmpty());
}

// The front door's verification through the session: the demo, planned over two ranks, loads
// bit for bit; the checkpoint is the one the session has open.
TEST(CheckpointSessionTest, VerifiesTheOpenCheckpoint)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    QTemporaryDir dir;
    const QString layoutPath = writeDemoLayout(dir);
    ASSERT_FALSE(layoutPath.isEmpty());

    CheckpointSession session;
    QSignalSpy opened(&session, &CheckpointSession::opened);
    session.open(demo);
    ASSERT_TRUE(opened.wait(Timeout));
    session.setLayout(layoutPath);

    QSignalSpy verified(&session, &CheckpointSession::verificationChanged);
    QSignalSpy diffed(&session, &CheckpointSession::diffChanged);
    VerifyRequest request;
    request.dp = 2;
    session.runVerify(request);
    session.runDiff();
    ASSERT_TRUE(verified.wait(Timeout));
    const auto report = verified.at(0).at(0).value<VerifySnapshot>();
    ASSERT_TRUE(report);
    EXPECT_TRUE(report->result.clean());
    EXPECT_EQ(report->result.world, 2);
    EXPECT_GT(report->result.identical, 0u);
    if (diffed.isEmpty()) {
        ASSERT_TRUE(diffed.wait(Timeout));
    }
    const auto diff = diffed.last().at(0).value<DiffSnapshot>();
    ASSERT_TRUE(diff);
    EXPECT_TRUE(diff->clean());
    EXPECT_EQ(diff->expectedModel, diff->loadableModel);
}

// The session announces each stage and clears what a change makes stale: a new layout clears the
// diff and the verification, a new checkpoint everything.
TEST(CheckpointSessionTest, StagesAndWhatClearsThem)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    QTemporaryDir dir;
    const QString layoutPath = writeDemoLayout(dir);
    ASSERT_FALSE(layoutPath.isEmpty());

    CheckpointSession session;
    QSignalSpy opened(&session, &CheckpointSession::opened);
    QSignalSpy diffs(&session, &CheckpointSession::diffChanged);
    QSignalSpy verifications(&session, &CheckpointSession::verificationChanged);
    QSignalSpy ended(&session, &CheckpointSession::jobEnded);
    session.open(demo);
    ASSERT_TRUE(opened.wait(Timeout));
    ASSERT_TRUE(session.index());
    session.setLayout(layoutPath);
    session.runDiff();
    EXPECT_TRUE(session.isJobRunning());
    ASSERT_TRUE(diffs.wait(Timeout));
    ASSERT_TRUE(session.diff());
    EXPECT_TRUE(session.diff()->clean());
    if (ended.last().at(0).value<JobInfo>().kind != JobKind::Diff) {
        ASSERT_TRUE(ended.wait(Timeout));
    }
    EXPECT_EQ(ended.last().at(0).value<JobInfo>().kind, JobKind::Diff);
    EXPECT_TRUE(ended.last().at(1).toBool());
    EXPECT_FALSE(session.isJobRunning());

    VerifyRequest request;
    request.dp = 2;
    session.runVerify(request);
    ASSERT_TRUE(verifications.wait(Timeout));
    ASSERT_TRUE(session.verification());
    EXPECT_TRUE(session.verification()->result.clean());

    session.setLayout(layoutPath); // stale now: both cleared, each announced
    EXPECT_FALSE(session.diff());
    EXPECT_FALSE(session.verification());
    EXPECT_FALSE(diffs.last().at(0).value<DiffSnapshot>());
    EXPECT_FALSE(verifications.last().at(0).value<VerifySnapshot>());

    session.runDiff();
    ASSERT_TRUE(diffs.wait(Timeout));
    // Opening again: what is shown stays until the new one is open, then everything is cleared.
    const IndexSnapshot before = session.index();
    opened.clear();
    session.open(demo);
    EXPECT_EQ(session.index(), before);
    EXPECT_TRUE(session.diff());
    EXPECT_EQ(session.openingPath(), demo);
    ASSERT_TRUE(opened.wait(Timeout));
    EXPECT_TRUE(session.index());
    EXPECT_NE(session.index(), before);
    EXPECT_FALSE(session.diff());
    EXPECT_FALSE(diffs.last().at(0).value<DiffSnapshot>());
}

// A layout generated from the demo's config.json on the long lane becomes the layout; the same
// as the CLI's `layout --from-config`, so the demo diffs clean against it. A config that does
// not describe a model ends the job with the backend's one-line error, and no layout.
TEST(CheckpointSessionTest, LayoutFromAModelConfig)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    CheckpointSession session;
    QSignalSpy opened(&session, &CheckpointSession::opened);
    QSignalSpy layouts(&session, &CheckpointSession::layoutChanged);
    QSignalSpy diffs(&session, &CheckpointSession::diffChanged);
    QSignalSpy ended(&session, &CheckpointSession::jobEnded);
    session.open(demo);
    ASSERT_TRUE(opened.wait(Timeout));
    session.setConfig(demo + QStringLiteral("/config.json"));
    ASSERT_TRUE(layouts.wait(Timeout));
    const QString path = layouts.last().at(0).toString();
    EXPECT_EQ(session.layoutPath(), path);
    auto layout = readLayout(QFile::encodeName(path).toStdString());
    ASSERT_TRUE(layout.ok()) << layout.error().toString();
    auto cli = layoutFromConfig(
        QFile::encodeName(demo + QStringLiteral("/config.json")).toStdString(), {});
    ASSERT_TRUE(cli.ok());
    EXPECT_EQ(layoutToJson(*layout), layoutToJson(*cli));
    session.runDiff();
    ASSERT_TRUE(diffs.wait(Timeout));
    ASSERT_TRUE(session.diff());
    EXPECT_TRUE(session.diff()->clean());

    QTemporaryDir dir;
    QFile bad(dir.filePath(QStringLiteral("config.json")));
    ASSERT_TRUE(bad.open(QIODevice::WriteOnly));
    bad.write(R"({"model_type": "llama", "hidden_size": 64})");
    bad.close();
    // The diff's own end may still be on its way: let it arrive first.
    while (session.isJobRunning())
        ASSERT_TRUE(ended.wait(Timeout));
    ended.clear();
    session.setConfig(bad.fileName());
    ASSERT_TRUE(ended.wait(Timeout));
    EXPECT_EQ(ended.last().at(0).value<JobInfo>().kind, JobKind::Layout);
    EXPECT_FALSE(ended.last().at(1).toBool());
    EXPECT_TRUE(ended.last().at(2).toString().contains(bad.fileName()));
    EXPECT_EQ(session.layoutPath(), path); // the previous one stays
}

// The load diff as the window lists it: every entry of the demo's clean diff fills, none is a
// problem; with the MLA rule switched off, a partial load under ignore_all keeps exactly the
// parameters the diff names at their initial values, and the list marks those rows (the ten
// fused MLA parameters of the README's negative control).
TEST(DiffListModelTest, MarksWhatTheLoadKeepsAtInit)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    CheckpointSession session;
    QSignalSpy opened(&session, &CheckpointSession::opened);
    QSignalSpy layouts(&session, &CheckpointSession::layoutChanged);
    QSignalSpy diffs(&session, &CheckpointSession::diffChanged);
    session.open(demo);
    ASSERT_TRUE(opened.wait(Timeout));
    session.setConfig(demo + QStringLiteral("/config.json"));
    ASSERT_TRUE(layouts.wait(Timeout));
    session.runDiff();
    ASSERT_TRUE(diffs.wait(Timeout));

    DiffListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setDiff(session.diff());
    ASSERT_GT(model.rowCount(), 0);
    for (int r = 0; r < model.rowCount(); ++r)
        EXPECT_FALSE(model.index(r, 0).data(DiffListModel::ProblemRole).toBool())
            << model.index(r, 0).data().toString().toStdString();

    DiffOptions options;
    options.disabledRules = {"mla_down_proj"};
    options.strictLoad = false;
    options.strictness = Strictness::IgnoreAll;
    session.runDiff(options);
    ASSERT_TRUE(diffs.wait(Timeout));
    if (!session.diff()) {
        ASSERT_TRUE(diffs.wait(Timeout));
    }
    model.setDiff(session.diff());
    const auto &kept = session.diff()->outcome.keptAtInit;
    EXPECT_EQ(kept.size(), 10u);
    int marked = 0;
    for (int r = 0; r < model.rowCount(); ++r) {
        const QModelIndex i = model.index(r, 0);
        if (i.data(DiffListModel::KeptAtInitRole).toBool()) {
            ++marked;
            EXPECT_TRUE(std::find(kept.begin(), kept.end(), i.data().toString().toStdString()) !=
                        kept.end());
            EXPECT_EQ(model.index(r, DiffListModel::LoadColumn).data().toString(),
                      QStringLiteral("silently kept at initial values"));
        }
    }
    EXPECT_EQ(marked, 10);

    DiffFilterProxy proxy;
    proxy.setSourceModel(&model);
    proxy.setStatusFilter(QStringLiteral("problems"));
    EXPECT_GE(proxy.rowCount(), 10);
    proxy.setFilterText(QStringLiteral("linear_qkv_down_proj"));
    for (int r = 0; r < proxy.rowCount(); ++r)
        EXPECT_TRUE(
            proxy.index(r, 0).data().toString().contains(QStringLiteral("linear_qkv_down_proj")));
}

// A checkpoint saved again over the open one is noticed, and a reload says what changed; one
// deleted while open fails its reload with one line, and the session goes on.
TEST_F(BackendRunnerTest, ReloadSaysWhatChangedOnDiskAndSurvivesDeletion)
{
    QTemporaryDir dir;
    const QString ckpt = dir.filePath(QStringLiteral("ckpt"));
    const QString save =
        QStringLiteral("import sys, warnings, torch, torch.distributed.checkpoint as dcp\n"
                       "warnings.filterwarnings('ignore')\n"
                       "dcp.save(%1, checkpoint_id=sys.argv[1])\n");
    ASSERT_EQ(
        runPython(save.arg(QStringLiteral("{'a': torch.ones(4), 'b': torch.zeros(2, 3)}")), ckpt),
        QString());
    CheckpointSession session;
    QSignalSpy opened(&session, &CheckpointSession::opened);
    QSignalSpy changed(&session, &CheckpointSession::changedOnDisk);
    QSignalSpy reloaded(&session, &CheckpointSession::reloaded);
    QSignalSpy failed(&session, &CheckpointSession::openFailed);
    session.open(ckpt);
    ASSERT_TRUE(opened.wait(Timeout));

    // Saved again by torch: 'a' gone, 'b' reshaped, 'c' new.
    ASSERT_EQ(
        runPython(save.arg(QStringLiteral("{'b': torch.zeros(3, 3), 'c': torch.ones(1)}")), ckpt),
        QString());
    ASSERT_TRUE(changed.count() > 0 || changed.wait(Timeout));
    session.reload();
    ASSERT_TRUE(reloaded.wait(Timeout));
    const QString summary = reloaded.at(0).at(0).toString();
    EXPECT_TRUE(summary.contains(QStringLiteral("1 key added"))) << summary.toStdString();
    EXPECT_TRUE(summary.contains(QStringLiteral("1 removed"))) << summary.toStdString();
    EXPECT_TRUE(summary.contains(QStringLiteral("1 changed shape"))) << summary.toStdString();
    EXPECT_TRUE(summary.contains(QStringLiteral("save_id"))) << summary.toStdString();
    ASSERT_TRUE(session.index());
    EXPECT_EQ(session.index()->tensors.size(), 2u);

    // Reloading what did not change says so.
    reloaded.clear();
    session.reload();
    ASSERT_TRUE(reloaded.wait(Timeout));
    EXPECT_TRUE(reloaded.at(0).at(0).toString().contains(QStringLiteral("nothing changed")));

    // Deleted while open.
    changed.clear();
    ASSERT_TRUE(QDir(ckpt).removeRecursively());
    ASSERT_TRUE(changed.count() > 0 || changed.wait(Timeout));
    const IndexSnapshot shown = session.index();
    session.reload();
    ASSERT_TRUE(failed.wait(Timeout));
    const QString error = failed.at(0).at(1).toString();
    EXPECT_FALSE(error.contains(QLatin1Char('\n')));
    EXPECT_TRUE(error.contains(QStringLiteral("ckpt"))) << error.toStdString();
    EXPECT_EQ(session.index(), shown); // what was read stays on screen

    // The session goes on: another checkpoint opens.
    opened.clear();
    session.open(s_path);
    ASSERT_TRUE(opened.wait(Timeout));
}

namespace {

// Every row of two trees, recursively: the same names, columns and roles.
void expectSameRows(const QAbstractItemModel &a, const QAbstractItemModel &b,
                    const QModelIndex &pa = {}, const QModelIndex &pb = {})
{
    ASSERT_EQ(a.rowCount(pa), b.rowCount(pb));
    for (int r = 0; r < a.rowCount(pa); ++r)
        for (int c = 0; c < a.columnCount(pa); ++c) {
            const QModelIndex x = a.index(r, c, pa), y = b.index(r, c, pb);
            for (int role : {int(Qt::DisplayRole), int(Qt::ToolTipRole), int(KeyRole),
                             int(BytesRole), int(ChunkCountRole), int(ProblemCountRole),
                             int(LeafCountRole), int(NumelRole), int(SortRole)})
                ASSERT_EQ(x.data(role), y.data(role)) << x.data(KeyRole).toString().toStdString()
                                                      << " column " << c << " role " << role;
            if (c == 0)
                expectSameRows(a, b, x, y);
        }
}

} // namespace

// A DCP checkpoint's tree shows as soon as its keys are read, before the storage locations: the
// finished open then fills in that same tree (problems, stored sizes) without a reset, and the
// result is the tree the finished index builds by itself.
TEST_F(BackendRunnerTest, ShowsTheKeysFirstThenCompletesTheSameTree)
{
    QTemporaryDir dir;
    const QString ckpt = dir.filePath(QStringLiteral("ckpt"));
    // Nested dicts (planner data), objects, and a data file cut short: its problems are found
    // only after the storage locations are read.
    const QString save =
        QStringLiteral("import os, sys, warnings, torch, torch.distributed.checkpoint as dcp\n"
                       "warnings.filterwarnings('ignore')\n"
                       "sd = {'model': {'decoder.layers.0.mlp': {'weight': torch.ones(8, 4)},\n"
                       "                'decoder.layers.1.mlp': {'weight': torch.zeros(8, 4)}},\n"
                       "      'optimizer': {'state': {'step': 3, 'lr': 0.5}}, 'note': 'hello'}\n"
                       "dcp.save(sd, checkpoint_id=sys.argv[1])\n"
                       "data = os.path.join(sys.argv[1], '__0_0.distcp')\n"
                       "os.truncate(data, os.path.getsize(data) // 2)\n");
    ASSERT_EQ(runPython(save, ckpt), QString());

    CheckpointSession session;
    CheckpointTreeModel early;
    QAbstractItemModelTester tester(&early, QAbstractItemModelTester::FailureReportingMode::Fatal);
    IndexSnapshot keys;
    bool provisionalWhenShown = false, readableWhenShown = true;
    QObject::connect(&session, &CheckpointSession::keysKnown, &early, [&](const IndexSnapshot &k) {
        keys = k;
        early.adopt(session.takePreparedTree(k));
        provisionalWhenShown = early.isProvisional();
        const QModelIndex leaf =
            early.indexForKey(QStringLiteral("model.decoder.layers.0.mlp.weight"));
        readableWhenShown = !leaf.isValid() || early.tensorAt(leaf) != nullptr;
    });
    QSignalSpy opened(&session, &CheckpointSession::opened);
    session.open(ckpt);
    ASSERT_TRUE(opened.wait(Timeout));
    ASSERT_TRUE(keys) << "no early tree for a DCP checkpoint with planner data";
    EXPECT_TRUE(provisionalWhenShown);
    EXPECT_FALSE(readableWhenShown) << "an entry read before its storage locations";
    EXPECT_EQ(keys->problems.size(), 0u);
    const auto full = opened.at(0).at(0).value<IndexSnapshot>();
    ASSERT_TRUE(full);
    ASSERT_GT(full->problems.size(), 0u) << "the cut data file was not noticed";
    EXPECT_EQ(session.keysCompletedBy(full), keys);
    EXPECT_EQ(session.takePreparedTree(full), nullptr) << "a second tree built for nothing";

    QSignalSpy resets(&early, &QAbstractItemModel::modelReset);
    QSignalSpy changed(&early, &QAbstractItemModel::dataChanged);
    ASSERT_TRUE(early.completeIndex(full));
    EXPECT_FALSE(early.isProvisional());
    EXPECT_EQ(resets.count(), 0);
    EXPECT_EQ(changed.count(), 1);
    EXPECT_FALSE(early.completeIndex(full)) << "completed twice";
    EXPECT_NE(
        early.tensorAt(early.indexForKey(QStringLiteral("model.decoder.layers.0.mlp.weight"))),
        nullptr);

    CheckpointTreeModel rebuilt;
    rebuilt.setIndex(full);
    expectSameRows(early, rebuilt);
    uint64_t problems = 0;
    for (int r = 0; r < early.rowCount(); ++r)
        problems += early.index(r, 0).data(ProblemCountRole).toULongLong();
    EXPECT_EQ(problems, full->problems.size());
}

// A big checkpoint read whole (the persistent index) shows its top-level rows first, the index
// the open ends with, then the whole tree built beside them, which replaces them.
TEST_F(BackendRunnerTest, ShowsTheTopRowsFirstThenTheWholeTree)
{
    // A torch.save file is read whole, as a big DCP checkpoint is from the persistent index:
    // with the threshold at one entry it stands for a big one.
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("model.pt"));
    const QString save = QStringLiteral(
        "import sys, torch\n"
        "sd = {'model': {'decoder.layers.0.mlp.weight': torch.ones(8, 4),\n"
        "                'decoder.layers.1.mlp.weight': torch.zeros(8, 4),\n"
        "                'decoder.final_norm.weight': torch.ones(4)},\n"
        "      'optimizer': {'state': {0: {'step': torch.tensor(3.0)}}}, 'iteration': 7}\n"
        "torch.save(sd, sys.argv[1])\n");
    ASSERT_EQ(runPython(save, file), QString());
    CheckpointSession::setTopRowsFirstFrom(1);
    CheckpointSession session;
    CheckpointTreeModel shown;
    QAbstractItemModelTester tester(&shown, QAbstractItemModelTester::FailureReportingMode::Fatal);
    IndexSnapshot keys;
    bool topOnly = false;
    QObject::connect(&session, &CheckpointSession::keysKnown, &shown, [&](const IndexSnapshot &k) {
        keys = k;
        shown.adopt(session.takePreparedTree(k));
        topOnly = shown.isTopOnly();
    });
    QSignalSpy opened(&session, &CheckpointSession::opened);
    session.open(file);
    const bool done = opened.wait(Timeout);
    CheckpointSession::setTopRowsFirstFrom(100'000);
    ASSERT_TRUE(done);
    ASSERT_TRUE(keys) << "no top-level rows shown first";
    EXPECT_TRUE(topOnly);
    const auto full = opened.at(0).at(0).value<IndexSnapshot>();
    EXPECT_EQ(keys, full) << "the top rows are not the opened index's";
    EXPECT_EQ(session.keysCompletedBy(full), nullptr) << "a top-only tree completed in place";
    auto whole = session.takePreparedTree(full);
    ASSERT_NE(whole, nullptr) << "no whole tree built";
    QSignalSpy resets(&shown, &QAbstractItemModel::modelReset);
    shown.adopt(std::move(whole));
    EXPECT_EQ(resets.count(), 1);
    EXPECT_FALSE(shown.isTopOnly());
    CheckpointTreeModel rebuilt;
    rebuilt.setIndex(full);
    expectSameRows(shown, rebuilt);
}
