// SPDX-License-Identifier: MIT
// The window's session (CheckpointSession) over a RemoteBackend, against the same session over
// this process's backend: open → diff → verify → repair → export on the bundled demo, results
// equal byte for byte; the server killed mid-job and the session recovering. Run by
// tools/check_remote.py window (a real OpenSSH server on localhost: SHARDSCOPE_SSH,
// SHARDSCOPE_TEST_HOST, SHARDSCOPE_TEST_CLI); skipped without them.
#include "model/checkpointsession.h"
#include "model/remotebackend.h"

#include "../support/launchedranks.h"

#include <shardscope/report.h>

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>
#include <unistd.h>

using namespace shardscope;
using namespace shardscope::model;

namespace {

constexpr int Timeout = 60'000;
const QString Demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);

std::string native(const QString &path)
{
    return QFile::encodeName(path).toStdString();
}

// Every file under `root`: its bytes (a repair's manifest without its time and host).
std::map<QString, QByteArray> tree(const QString &root)
{
    std::map<QString, QByteArray> out;
    QDirIterator it(root, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        QFile f(path);
        if (!f.open(QIODevice::ReadOnly))
            continue;
        QByteArray bytes = f.readAll();
        if (path.endsWith(QStringLiteral("shardscope-fix.json")))
            bytes = QString::fromUtf8(bytes)
                        .replace(QRegularExpression(QStringLiteral("\"(created|time|written_at)\": "
                                                                   "\"[^\"]*\"")),
                                 QStringLiteral("\"T\""))
                        .toUtf8();
        out[QDir(root).relativeFilePath(path)] = bytes;
    }
    return out;
}

QString normalised(std::string text)
{
    return QString::fromStdString(text).replace(
        QRegularExpression(QStringLiteral("(\"seconds\": )[0-9.e+-]+")), QStringLiteral("\\1S"));
}

class RemoteWindow : public ::testing::Test
{
protected:
    void SetUp() override
    {
        host = qEnvironmentVariable("SHARDSCOPE_TEST_HOST");
        cli = qEnvironmentVariable("SHARDSCOPE_TEST_CLI");
        if (host.isEmpty() || cli.isEmpty())
            GTEST_SKIP() << "run through tools/check_remote.py window (an sshd on localhost)";
        ASSERT_TRUE(dir.isValid());
        layout = dir.filePath(QStringLiteral("layout.json"));
        auto l = layoutFromConfig(native(Demo + QStringLiteral("/config.json")), {});
        ASSERT_TRUE(l);
        QFile f(layout);
        ASSERT_TRUE(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(layoutToJson(*l)));
    }

    std::shared_ptr<RemoteBackend> connectRemote()
    {
        RemoteTarget target;
        target.host = host.toStdString();
        target.server = cli.toStdString();
        auto backend = RemoteBackend::connect(target, {});
        EXPECT_TRUE(backend) << (backend ? "" : backend.error().toString());
        return backend ? *backend : nullptr;
    }

    QString host, cli, layout;
    QTemporaryDir dir;
};

// Waits for `signal` of `session`; fails with the job's message when a job fails first.
template<typename Signal>
bool waitFor(CheckpointSession &session, Signal signal, QString *failure = nullptr)
{
    QSignalSpy done(&session, signal);
    QSignalSpy ended(&session, &CheckpointSession::jobEnded);
    QElapsedTimer timer;
    timer.start();
    while (done.isEmpty() && timer.elapsed() < Timeout) {
        for (const QList<QVariant> &e : ended)
            if (!e.at(1).toBool()) {
                if (failure)
                    *failure = e.at(2).toString();
                return false;
            }
        done.wait(50);
    }
    return !done.isEmpty();
}

// The first jobEnded of a job of `kind` a spy saw (other jobs end around it): (ok, message).
std::optional<std::pair<bool, QString>> endedOf(const QSignalSpy &spy, JobKind kind)
{
    for (const QList<QVariant> &e : spy)
        if (e.at(0).value<JobInfo>().kind == kind)
            return std::pair{e.at(1).toBool(), e.at(2).toString()};
    return std::nullopt;
}

struct Results
{
    QString index, diff, verify, repaired, report;
    std::map<QString, QByteArray> fixed;
};

Results runAll(CheckpointSession &s, const QString &layout, const QString &out,
               const QString &reportPath)
{
    Results r;
    QString failure;
    s.open(Demo);
    EXPECT_TRUE(waitFor(s, &CheckpointSession::opened, &failure)) << failure.toStdString();
    if (!s.index())
        return r;
    // The index as inspect --json prints it whole: every entry and problem.
    InspectResult whole;
    whole.index = s.index();
    for (const TensorEntry &t : s.index()->tensors)
        whole.tensors.push_back({&t, std::nullopt, {}, {}});
    for (const ObjectEntry &o : s.index()->objects)
        whole.objects.push_back({&o, {}});
    whole.problems = s.index()->problems;
    r.index = QString::fromStdString(inspectToJson(whole, native(Demo)));
    s.setLayout(layout);
    DiffOptions options;
    options.disabledRules = {"mla_down_proj"};
    s.runDiff(options);
    EXPECT_TRUE(waitFor(s, &CheckpointSession::diffChanged, &failure)) << failure.toStdString();
    if (s.diff())
        r.diff = QString::fromStdString(diffToJson(*s.diff()));
    VerifyRequest v;
    v.dp = 2;
    s.runVerify(v);
    EXPECT_TRUE(waitFor(s, &CheckpointSession::verificationChanged, &failure))
        << failure.toStdString();
    if (s.verification())
        r.verify = normalised(verifyToJson(*s.verification()));
    FixRequest fix;
    fix.output = native(out);
    fix.options = options;
    QSignalSpy repaired(&s, &CheckpointSession::repaired);
    s.saveRepaired(fix);
    EXPECT_TRUE(waitFor(s, &CheckpointSession::repaired, &failure)) << failure.toStdString();
    if (!repaired.isEmpty())
        r.repaired = repaired.first().at(0).toString();
    r.fixed = tree(out);
    ReportRequest report;
    report.format = ReportFormat::Json;
    DiffOptions preview = options;
    preview.previewRepair = true;
    report.diff = DiffRequest{native(Demo), native(layout), preview, nullptr};
    s.exportReport(report, reportPath);
    EXPECT_TRUE(waitFor(s, &CheckpointSession::exported, &failure)) << failure.toStdString();
    QFile f(reportPath);
    if (f.open(QIODevice::ReadOnly))
        r.report = QString::fromUtf8(f.readAll());
    return r;
}

TEST_F(RemoteWindow, OpenDiffVerifyRepairExportAsHere)
{
    const QString out = dir.filePath(QStringLiteral("fixed"));
    CheckpointSession local;
    const Results here =
        runAll(local, layout, out, dir.filePath(QStringLiteral("report-here.json")));
    ASSERT_TRUE(QDir().rename(out, out + QStringLiteral(".here")));
    auto backend = connectRemote();
    ASSERT_TRUE(backend);
    CheckpointSession remote(backend);
    EXPECT_EQ(remote.location(), host);
    const Results there =
        runAll(remote, layout, out, dir.filePath(QStringLiteral("report-there.json")));
    EXPECT_FALSE(here.diff.isEmpty());
    EXPECT_EQ(there.index, here.index);
    EXPECT_EQ(there.diff, here.diff);
    EXPECT_EQ(there.verify, here.verify);
    // The layout here is not on the server's host: it is written there beside the output,
    // and the repair names it there (here, the layout file as it is).
    const QString beside = out + QStringLiteral(".layout.json");
    auto named = [&](QString text) { return text.replace(beside, layout); };
    EXPECT_TRUE(there.repaired.contains(beside)) << there.repaired.toStdString();
    EXPECT_EQ(named(there.repaired), here.repaired);
    EXPECT_FALSE(here.fixed.empty());
    std::map<QString, QByteArray> fixedThere;
    for (const auto &[name, bytes] : there.fixed)
        fixedThere[name] = name.endsWith(QStringLiteral("shardscope-fix.json"))
                               ? named(QString::fromUtf8(bytes)).toUtf8()
                               : bytes;
    EXPECT_TRUE(fixedThere == here.fixed) << "the repaired checkpoint differs";
    QFile written(beside), sent(layout);
    ASSERT_TRUE(written.open(QIODevice::ReadOnly) && sent.open(QIODevice::ReadOnly));
    EXPECT_EQ(written.readAll(), sent.readAll())
        << "the layout beside the output is not the one sent";
    EXPECT_FALSE(here.report.isEmpty());
    EXPECT_EQ(there.report, here.report);
    // A tensor's details, computed there, as here.
    const std::string key = here.index.isEmpty() ? "" : remote.index()->tensors.front().key.str();
    QSignalSpy hereDetails(&local, &CheckpointSession::tensorDetailsReady);
    QSignalSpy thereDetails(&remote, &CheckpointSession::tensorDetailsReady);
    local.requestTensorDetails(QString::fromStdString(key));
    remote.requestTensorDetails(QString::fromStdString(key));
    ASSERT_TRUE(hereDetails.wait(Timeout) || !hereDetails.isEmpty());
    ASSERT_TRUE(!thereDetails.isEmpty() || thereDetails.wait(Timeout));
    const auto a = hereDetails.first().at(0).value<TensorDetails>();
    const auto b = thereDetails.first().at(0).value<TensorDetails>();
    EXPECT_TRUE(b.ok()) << b.error.toStdString();
    EXPECT_EQ(b.sha256, a.sha256);
    EXPECT_EQ(b.stats.fingerprint, a.stats.fingerprint);
    EXPECT_EQ(b.histogram, a.histogram);
}

// A structural comparison whose sides live in two places (one here, one on the host; either
// open in the window) is the comparison of the same two checkpoints here.
TEST_F(RemoteWindow, CompareWithACheckpointInAnotherPlaceAsHere)
{
    // A checkpoint whose keys differ from the demo's: the demo repaired by fix.
    const QString other = dir.filePath(QStringLiteral("other"));
    FixRequest fix;
    fix.checkpoint = native(Demo);
    fix.layout = native(layout);
    fix.output = native(other);
    fix.options.disabledRules = {"mla_down_proj"};
    auto fixed = runFix(fix);
    ASSERT_TRUE(fixed && fixed->written) << (fixed ? "not written" : fixed.error().toString());
    QString failure;
    auto compared = [&](CheckpointSession &s, auto open) {
        s.open(Demo);
        EXPECT_TRUE(waitFor(s, &CheckpointSession::opened, &failure)) << failure.toStdString();
        open(s);
        EXPECT_TRUE(waitFor(s, &CheckpointSession::compareOpened, &failure))
            << failure.toStdString();
        s.runCompare();
        EXPECT_TRUE(waitFor(s, &CheckpointSession::comparisonChanged, &failure))
            << failure.toStdString();
        return s.comparison() ? QString::fromStdString(checkpointDiffToJson(*s.comparison()))
                              : QString();
    };
    CheckpointSession local;
    const QString here = compared(local, [&](CheckpointSession &s) { s.openCompare(other); });
    ASSERT_TRUE(here.contains(QStringLiteral("\"changes\": ["))) << here.toStdString();
    ASSERT_FALSE(local.comparison()->changes.empty()) << "nothing differs: nothing is tested";

    // Open here, compared with the host's.
    CheckpointSession toHost;
    toHost.setRemoteConnector(
        [this](const RemoteTarget &target) -> Result<std::shared_ptr<CheckpointBackend>> {
            RemoteTarget t = target;
            t.server = cli.toStdString();
            auto b = RemoteBackend::connect(t, {});
            if (!b)
                return b.error();
            return std::shared_ptr<CheckpointBackend>(*b);
        });
    EXPECT_EQ(
        compared(toHost,
                 [&](CheckpointSession &s) { s.openCompare(host + QLatin1Char(':') + other); }),
        here);
    EXPECT_EQ(toHost.compareLocation(), host);
    EXPECT_EQ(toHost.comparePath(), other);

    // Open on the host, compared with one here.
    auto backend = connectRemote();
    ASSERT_TRUE(backend);
    CheckpointSession onHost(backend);
    EXPECT_EQ(compared(onHost, [&](CheckpointSession &s) { s.openCompareHere(other); }), here);
    EXPECT_TRUE(onHost.compareLocation().isEmpty());
    // Values by each stored tensor's SHA-256, computed where each lives: the verdict of the
    // element-by-element comparison here for every tensor both name by one stored key.
    local.runValues();
    ASSERT_TRUE(waitFor(local, &CheckpointSession::valuesChanged, &failure))
        << failure.toStdString();
    onHost.runValues();
    ASSERT_TRUE(waitFor(onHost, &CheckpointSession::valuesChanged, &failure))
        << failure.toStdString();
    ASSERT_TRUE(local.values() && onHost.values());
    EXPECT_TRUE(local.values()->method.empty());
    EXPECT_EQ(onHost.values()->method, "sha256");
    std::map<std::string, TensorValueDiff::Verdict> byDigest;
    for (const TensorValueDiff &t : onHost.values()->tensors)
        byDigest[t.name] = t.verdict;
    size_t checked = 0;
    for (const TensorValueDiff &t : local.values()->tensors)
        if (t.keysA.size() == 1 && t.keysA == t.keysB) {
            ++checked;
            EXPECT_EQ(byDigest.count(t.keysA[0]) ? int(byDigest[t.keysA[0]]) : -1, int(t.verdict))
                << t.keysA[0];
        }
    EXPECT_GT(checked, 0u);
}

TEST_F(RemoteWindow, AServerKilledMidJobLeavesTheWindowsStateAndReconnects)
{
    auto backend = connectRemote();
    ASSERT_TRUE(backend);
    CheckpointSession s(backend);
    QString failure;
    s.open(Demo);
    ASSERT_TRUE(waitFor(s, &CheckpointSession::opened, &failure)) << failure.toStdString();
    s.setLayout(layout);
    s.runDiff();
    ASSERT_TRUE(waitFor(s, &CheckpointSession::diffChanged, &failure)) << failure.toStdString();
    const IndexSnapshot shown = s.index();
    const DiffSnapshot diff = s.diff();
    // A verify on one thread under a small budget, killed once it runs.
    QSignalSpy ended(&s, &CheckpointSession::jobEnded);
    VerifyRequest v;
    v.dp = 2;
    v.threads = 1;
    s.runVerify(v);
    ASSERT_EQ(::kill(pid_t(backend->session()->server().pid), SIGKILL), 0);
    QElapsedTimer timer;
    timer.start();
    while (!endedOf(ended, JobKind::Verify) && timer.elapsed() < Timeout)
        ended.wait(50);
    const auto verifyEnded = endedOf(ended, JobKind::Verify);
    ASSERT_TRUE(verifyEnded);
    EXPECT_FALSE(verifyEnded->first);
    const QString message = verifyEnded->second;
    EXPECT_TRUE(message.contains(QStringLiteral("was lost"))) << message.toStdString();
    EXPECT_FALSE(message.contains(QLatin1Char('\n')));
    EXPECT_FALSE(s.connected());
    // What was shown stays.
    EXPECT_EQ(s.index(), shown);
    EXPECT_EQ(s.diff(), diff);
    EXPECT_EQ(s.path(), Demo);
    // A tensor's details fail in one line, and nothing else changes.
    QSignalSpy details(&s, &CheckpointSession::tensorDetailsReady);
    s.requestTensorDetails(QString::fromStdString(shown->tensors.front().key.str()));
    ASSERT_TRUE(details.wait(Timeout));
    EXPECT_FALSE(details.first().at(0).value<TensorDetails>().ok());
    EXPECT_EQ(s.index(), shown);
    // Reconnect: a new server, the checkpoint opened again, and the jobs run.
    s.reconnect();
    ASSERT_TRUE(waitFor(s, &CheckpointSession::opened, &failure)) << failure.toStdString();
    EXPECT_TRUE(s.connected());
    EXPECT_NE(s.index(), shown);
    s.runVerify(v);
    ASSERT_TRUE(waitFor(s, &CheckpointSession::verificationChanged, &failure))
        << failure.toStdString();
    EXPECT_TRUE(s.verification()->result.clean());
}

TEST_F(RemoteWindow, AHungLaunchedJobIsCancelledAndTheConnectionStays)
{
    auto backend = connectRemote();
    ASSERT_TRUE(backend);
    if (!backend->session()->server().torchrun)
        GTEST_SKIP() << "no torchrun on the server's PATH";
    CheckpointSession s(backend);
    QString failure;
    s.open(Demo);
    ASSERT_TRUE(waitFor(s, &CheckpointSession::opened, &failure)) << failure.toStdString();
    s.setLayout(layout);
    RemoteLaunch launch;
    launch.launcher = RemoteLaunch::Launcher::Torchrun;
    launch.ranks = 2;
    backend->setLaunch(launch);
    QSignalSpy ended(&s, &CheckpointSession::jobEnded);
    s.runVerify({});
    std::vector<pid_t> ranks;
    QElapsedTimer timer;
    timer.start();
    while (ranks.size() < 2 && !endedOf(ended, JobKind::Verify) && timer.elapsed() < Timeout) {
        ranks = procs::launchedRanks(pid_t(backend->session()->server().pid));
        QTest::qWait(10);
    }
    ASSERT_EQ(ranks.size(), 2u) << "the job's two ranks did not start";
    for (pid_t r : ranks) // hung: they never answer again
        ::kill(r, SIGSTOP);
    QTest::qWait(300);
    timer.restart();
    s.cancel();
    while (!endedOf(ended, JobKind::Verify) && timer.elapsed() < Timeout)
        ended.wait(50);
    const auto cancelled = endedOf(ended, JobKind::Verify);
    if (!cancelled) // the ranks ended here, so that the test fails rather than hangs
        for (pid_t r : ranks)
            ::kill(r, SIGKILL);
    ASSERT_TRUE(cancelled) << "the cancel did not end the job";
    EXPECT_FALSE(cancelled->first);
    EXPECT_EQ(cancelled->second, jobCancelledText());
    // The job is stopped there (SIGTERM, SIGCONT, SIGKILL), not left behind.
    timer.restart();
    while (std::any_of(ranks.begin(), ranks.end(), procs::running) && timer.elapsed() < 30'000)
        QTest::qWait(50);
    for (pid_t r : ranks)
        if (procs::running(r)) {
            ADD_FAILURE() << "rank " << r << " still runs";
            ::kill(r, SIGKILL);
        }
    // The connection stays, and the next job runs.
    EXPECT_TRUE(s.connected());
    backend->setLaunch({});
    s.runDiff();
    EXPECT_TRUE(waitFor(s, &CheckpointSession::diffChanged, &failure)) << failure.toStdString();
}

} // namespace
