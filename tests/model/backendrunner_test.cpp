// SPDX-License-Identifier: MIT
// BackendRunner against a real torch.save file written by the pinned torch (SHARDSCOPE_PYTHON).
#include "model/backendrunner.h"
#include "model/checkpointtreemodel.h"

#include <QAbstractItemModelTester>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <gtest/gtest.h>

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
    IndexSnapshot open(BackendRunner &runner)
    {
        QSignalSpy opened(&runner, &BackendRunner::checkpointOpened);
        QSignalSpy failed(&runner, &BackendRunner::openFailed);
        runner.openCheckpoint(s_path);
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

TEST_F(BackendRunnerTest, OpensAndComputesTensorDetails)
{
    BackendRunner runner;
    QSignalSpy progress(&runner, &BackendRunner::progress);
    const IndexSnapshot index = open(runner);
    ASSERT_TRUE(index);
    EXPECT_EQ(index->format, Format::TorchSave);
    ASSERT_NE(index->findTensor("a"), nullptr);
    EXPECT_GE(progress.count(), 2);

    // The snapshot feeds the tree model directly.
    CheckpointTreeModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setIndex(index);
    ASSERT_TRUE(model.indexForKey(QStringLiteral("a")).isValid());

    QSignalSpy ready(&runner, &BackendRunner::tensorDetailsReady);
    runner.requestTensorDetails(QStringLiteral("a"));
    ASSERT_TRUE(ready.wait(Timeout));
    ASSERT_EQ(ready.count(), 1);
    EXPECT_EQ(ready.at(0).at(0).toString(), QStringLiteral("a"));
    const auto details = ready.at(0).at(1).value<TensorDetails>();
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
    runner.requestTensorDetails(QStringLiteral("b"));
    ASSERT_TRUE(ready.wait(Timeout));
    const auto b = ready.at(1).at(1).value<TensorDetails>();
    ASSERT_TRUE(b.hasStats);
    EXPECT_EQ(b.stats.min, -2.0);
    EXPECT_EQ(b.stats.max, 3.25);
}

TEST_F(BackendRunnerTest, NewerDetailsRequestWins)
{
    BackendRunner runner;
    ASSERT_TRUE(open(runner));
    QSignalSpy ready(&runner, &BackendRunner::tensorDetailsReady);
    QSignalSpy idle(&runner, &BackendRunner::idle);
    runner.requestTensorDetails(QStringLiteral("a"));
    runner.requestTensorDetails(QStringLiteral("b"));
    runner.requestTensorDetails(QStringLiteral("a"));
    ASSERT_TRUE(idle.wait(Timeout));
    QCoreApplication::processEvents();
    // Older requests are replaced in the queue or dropped as stale: only the last one answers.
    ASSERT_EQ(ready.count(), 1);
    EXPECT_EQ(ready.at(0).at(0).toString(), QStringLiteral("a"));
}

TEST_F(BackendRunnerTest, ReportsMissingTensorsAndDecodesObjects)
{
    BackendRunner runner;
    ASSERT_TRUE(open(runner));
    QSignalSpy ready(&runner, &BackendRunner::tensorDetailsReady);
    runner.requestTensorDetails(QStringLiteral("nope"));
    ASSERT_TRUE(ready.wait(Timeout));
    EXPECT_FALSE(ready.at(0).at(1).value<TensorDetails>().ok());

    QSignalSpy object(&runner, &BackendRunner::objectReady);
    runner.requestObject(QStringLiteral("step"));
    ASSERT_TRUE(object.wait(Timeout));
    const auto details = object.at(0).at(1).value<ObjectDetails>();
    ASSERT_TRUE(details.ok()) << details.error.toStdString();
    EXPECT_EQ(details.text, QStringLiteral("7"));
}

TEST_F(BackendRunnerTest, OpenFailureIsOneLine)
{
    BackendRunner runner;
    QSignalSpy failed(&runner, &BackendRunner::openFailed);
    runner.openCheckpoint(QDir(s_dir->path()).filePath(QStringLiteral("missing.pt")));
    ASSERT_TRUE(failed.wait(Timeout));
    const QString error = failed.at(0).at(0).toString();
    EXPECT_FALSE(error.isEmpty());
    EXPECT_FALSE(error.contains(QLatin1Char('\n')));
}

TEST_F(BackendRunnerTest, ReopeningDropsResultsOfTheOldGeneration)
{
    BackendRunner runner;
    ASSERT_TRUE(open(runner));
    QSignalSpy ready(&runner, &BackendRunner::tensorDetailsReady);
    QSignalSpy opened(&runner, &BackendRunner::checkpointOpened);
    QSignalSpy idle(&runner, &BackendRunner::idle);
    const quint64 before = runner.generation();
    runner.requestTensorDetails(QStringLiteral("a"));
    runner.openCheckpoint(s_path); // a new generation: the details above are stale
    EXPECT_EQ(runner.generation(), before + 1);
    ASSERT_TRUE(opened.wait(Timeout));
    if (runner.isBusy()) {
        ASSERT_TRUE(idle.wait(Timeout));
    }
    QCoreApplication::processEvents();
    EXPECT_EQ(ready.count(), 0);
}
