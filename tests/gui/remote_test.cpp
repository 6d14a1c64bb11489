// SPDX-License-Identifier: MIT
// The window's side of a remote checkpoint, driven as a user drives it, through the loopback
// transport (tools/loopback_ssh.sh stands in for ssh and runs the server, this build's
// shardscope-cli, as a child process; SHARDSCOPE_SSH points at it): File ▸ Open Remote…'s
// dialog (hosts from a test ~/.ssh/config, recent remote locations), ssh's password prompt shown
// in the window and answered through the askpass helper (this binary, as the app is: main.cpp
// calls runAskpassHelper first), the remote directory browser, and verify as a launched job.
#include "mainwindow.h"
#include "remotebrowser.h"
#include "remoteconnect.h"
#include "testwait.h"

#include "model/checkpointsession.h"
#include "model/remotebackend.h"
#include "widgets/verifypanel.h"

#include "../support/launchedranks.h"

#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPointer>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QTreeWidget>

#include <gtest/gtest.h>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <map>
#include <unistd.h>

using namespace shardscope;
using namespace shardscope::gui;
using shardscope::tests::waitFor;

namespace {

const QString Demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
const QString Cli = QStringLiteral(SHARDSCOPE_TEST_CLI);

// Sets environment variables for one test and puts the old values back.
class Env
{
public:
    void set(const char *name, const QByteArray &value)
    {
        if (!m_old.count(name))
            m_old[name] =
                qEnvironmentVariableIsSet(name) ? std::optional(qgetenv(name)) : std::nullopt;
        qputenv(name, value);
    }
    void unset(const char *name)
    {
        if (!m_old.count(name))
            m_old[name] =
                qEnvironmentVariableIsSet(name) ? std::optional(qgetenv(name)) : std::nullopt;
        qunsetenv(name);
    }
    ~Env()
    {
        for (const auto &[name, value] : m_old) {
            if (value)
                qputenv(name.c_str(), *value);
            else
                qunsetenv(name.c_str());
        }
    }

private:
    std::map<std::string, std::optional<QByteArray>> m_old;
};

// Answers each top-level dialog of type T as it shows (a modal dialog runs its own loop, so
// the test cannot step past exec(): a timer does the user's part).
class Driver : public QObject
{
public:
    template<typename T>
    void on(std::function<void(T *)> handle)
    {
        m_handlers.push_back([handle](QWidget *w) {
            auto *t = qobject_cast<T *>(w);
            if (!t)
                return std::function<void()>();
            return std::function<void()>([handle, t] { handle(t); });
        });
    }
    // A message box nobody expected (a failed connection) is noted and closed, so that a
    // failure fails the test instead of waiting on a modal dialog forever.
    Driver()
    {
        on<QMessageBox>([this](QMessageBox *box) {
            messages << box->text();
            box->reject();
        });
        m_timer.setInterval(20);
        QObject::connect(&m_timer, &QTimer::timeout, this, [this] { poll(); });
        m_timer.start();
    }

    QStringList messages;

private:
    // A handler runs as an event of its own, not inside this timer's: one that opens a dialog
    // of its own (Browse… connecting, which prompts) has the next one handled from within its
    // loop, where Qt does not fire this timer again while its timeout is being handled.
    void poll()
    {
        for (QWidget *w : QApplication::topLevelWidgets()) {
            if (!w->isVisible() || m_handled.contains(w))
                continue;
            for (const auto &match : m_handlers)
                if (auto handle = match(w)) {
                    m_handled.insert(w);
                    QMetaObject::invokeMethod(this, handle, Qt::QueuedConnection);
                    return;
                }
        }
    }
    QTimer m_timer;
    std::vector<std::function<std::function<void()>(QWidget *)>> m_handlers;
    QSet<QWidget *> m_handled;
};

class RemoteGui : public ::testing::Test
{
protected:
    void SetUp() override
    {
        ASSERT_TRUE(tmp.isValid());
        home = QFileInfo(tmp.filePath(QStringLiteral("home"))).absoluteFilePath();
        ASSERT_TRUE(QDir().mkpath(home + QStringLiteral("/.ssh")));
        env.set("SHARDSCOPE_SSH", QByteArrayLiteral(SHARDSCOPE_TEST_LOOPBACK_SSH));
        env.set("HOME", QFile::encodeName(home)); // ~/.ssh/config, and the server's home
        env.set("SHARDSCOPE_CACHE_DIR", QFile::encodeName(tmp.filePath(QStringLiteral("cache"))));
        env.set("XDG_CACHE_HOME", QFile::encodeName(tmp.filePath(QStringLiteral("xdg"))));
        env.set("LOOPBACK_CACHE_DIR",
                QFile::encodeName(tmp.filePath(QStringLiteral("servercache"))));
        env.unset("LOOPBACK_ASKPASS_PROMPT");
        env.unset("LOOPBACK_ASKPASS_ANSWER");
        QSettings settings;
        for (const char *key : {"recentRemote", "remoteServer", "remoteLaunch"})
            settings.remove(QLatin1String(key));
    }

    void TearDown() override
    {
        QList<QPointer<QWidget>> windows;
        for (QWidget *w : QApplication::topLevelWidgets())
            if (qobject_cast<MainWindow *>(w))
                windows << w;
        for (const QPointer<QWidget> &w : windows)
            delete w.data();
    }

    // A password prompt on the way in: the loopback ssh asks SSH_ASKPASS as ssh would and
    // goes on only with `answer`.
    void askPassword(const QString &prompt, const QString &answer)
    {
        env.set("LOOPBACK_ASKPASS_PROMPT", prompt.toUtf8());
        env.set("LOOPBACK_ASKPASS_ANSWER", answer.toUtf8());
    }

    std::shared_ptr<model::RemoteBackend> connectTo(const QString &host, QString *error = nullptr)
    {
        auto target = RemoteTarget::parse(host.toStdString());
        EXPECT_TRUE(target);
        target->server = Cli.toStdString();
        QString why;
        auto backend = connectRemote(nullptr, *target, &why);
        if (error)
            *error = why;
        return backend;
    }

    Env env;
    QTemporaryDir tmp;
    QString home;
};

void touch(const QString &path)
{
    QFile f(path);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
}

// The rows of a browser's listing: name → the note column ("checkpoint", "link", …) and
// whether the name is bold.
std::map<QString, std::pair<QString, bool>> rows(const RemoteBrowser *b)
{
    std::map<QString, std::pair<QString, bool>> out;
    for (int i = 0; i < b->list()->topLevelItemCount(); ++i) {
        const QTreeWidgetItem *item = b->list()->topLevelItem(i);
        out[item->text(0)] = {item->text(2), item->font(0).bold()};
    }
    return out;
}

QTreeWidgetItem *rowNamed(RemoteBrowser *b, const QString &name)
{
    const auto found = b->list()->findItems(name, Qt::MatchExactly, 0);
    return found.isEmpty() ? nullptr : found.first();
}

void doubleClick(RemoteBrowser *b, const QString &name)
{
    QTreeWidgetItem *item = rowNamed(b, name);
    ASSERT_NE(item, nullptr) << name.toStdString();
    const QRect at = b->list()->visualItemRect(item);
    QTest::mouseClick(b->list()->viewport(), Qt::LeftButton, {}, at.center());
    QTest::mouseDClick(b->list()->viewport(), Qt::LeftButton, {}, at.center());
}

} // namespace

// File ▸ Open Remote… as a user goes through it: the hosts offered are the recent ones, then
// ~/.ssh/config's (wildcards and negations left out); a host's recent paths and server fill in;
// Browse… connects (ssh's password asked in the window, answered through the askpass helper),
// lists the remote home, marks what looks like a checkpoint, goes in and Up, and the path
// chosen fills the dialog; Open opens it in that same connection (no second prompt).
TEST_F(RemoteGui, OpenRemoteDialogBrowsesAndOpensInOneConnection)
{
    {
        QFile config(home + QStringLiteral("/.ssh/config"));
        ASSERT_TRUE(config.open(QIODevice::WriteOnly));
        config.write("Host cluster-a\n    HostName login.example\nHost *.wild !nope\n"
                     "Host cluster-b login2\n    User me\n");
    }
    addRecentRemoteLocation(QStringLiteral("recent-host"), QStringLiteral("/ckpt/one"),
                            QStringLiteral("/opt/ss/bin/shardscope-cli"));
    addRecentRemoteLocation(QStringLiteral("recent-host"), QStringLiteral("/ckpt/two"),
                            QStringLiteral("/opt/ss/bin/shardscope-cli"));
    // The remote home (the server runs as this user, HOME as set): runs of three kinds.
    const QString runs = home + QStringLiteral("/runs");
    for (const char *d : {"runs/hf", "runs/iter_0000100/mp_rank_00", "runs/plain/sub"})
        ASSERT_TRUE(QDir(home).mkpath(QLatin1String(d)));
    touch(runs + QStringLiteral("/hf/model.safetensors"));
    touch(runs + QStringLiteral("/notes.txt"));
    touch(runs + QStringLiteral("/weights.pt"));
    ASSERT_TRUE(QFile::link(Demo, runs + QStringLiteral("/demo")));
    askPassword(QStringLiteral("me@cluster-a's password: "), QStringLiteral("s3cret"));

    QStringList prompts, promptTitles;
    std::map<QString, std::pair<QString, bool>> homeRows, runsRows;
    QString afterUp, browseStatus;
    Driver driver;
    driver.on<QInputDialog>([&](QInputDialog *d) {
        prompts << d->labelText();
        promptTitles << d->windowTitle();
        d->setTextValue(QStringLiteral("s3cret"));
        d->accept();
    });
    driver.on<RemoteBrowser>([&](RemoteBrowser *b) {
        ASSERT_TRUE(waitFor([&] { return !b->listing(); }, 30'000));
        homeRows = rows(b);
        doubleClick(b, QStringLiteral("runs"));
        ASSERT_TRUE(waitFor(
            [&] { return !b->listing() && b->directory().endsWith(QStringLiteral("/runs")); },
            30'000));
        runsRows = rows(b);
        browseStatus = b->findChild<QLabel *>(QStringLiteral("status"))->text();
        QTest::mouseClick(b->findChild<QPushButton *>(QStringLiteral("up")), Qt::LeftButton);
        ASSERT_TRUE(waitFor(
            [&] { return !b->listing() && !b->directory().endsWith(QStringLiteral("/runs")); },
            30'000));
        afterUp = b->directory();
        doubleClick(b, QStringLiteral("runs"));
        ASSERT_TRUE(waitFor(
            [&] { return !b->listing() && b->directory().endsWith(QStringLiteral("/runs")); },
            30'000));
        b->list()->setCurrentItem(rowNamed(b, QStringLiteral("demo")));
        QTest::mouseClick(b->findChild<QPushButton *>(QStringLiteral("open")), Qt::LeftButton);
    });
    QStringList hostsOffered, recentPaths;
    QString recentServer, chosenPath;
    bool reused = false;
    driver.on<OpenRemoteDialog>([&](OpenRemoteDialog *d) {
        for (int i = 0; i < d->hostBox()->count(); ++i)
            hostsOffered << d->hostBox()->itemText(i);
        for (int i = 0; i < d->pathBox()->count(); ++i)
            recentPaths << d->pathBox()->itemText(i);
        recentServer = d->server();
        d->hostBox()->setCurrentText(QStringLiteral("me@cluster-a"));
        d->serverEdit()->setText(Cli);
        QTest::mouseClick(d->browseButton(), Qt::LeftButton); // runs the browser to its end
        chosenPath = d->path();
        reused = d->connection() != nullptr;
        d->accept();
    });
    openRemoteDialog(nullptr);

    EXPECT_EQ(driver.messages, QStringList());
    EXPECT_EQ(hostsOffered, (QStringList{QStringLiteral("recent-host"), QStringLiteral("cluster-a"),
                                         QStringLiteral("cluster-b"), QStringLiteral("login2")}));
    EXPECT_EQ(recentPaths, (QStringList{QStringLiteral("/ckpt/two"), QStringLiteral("/ckpt/one")}));
    EXPECT_EQ(recentServer, QStringLiteral("/opt/ss/bin/shardscope-cli"));
    // The password asked once, in the window, with the host named.
    EXPECT_EQ(prompts, QStringList{QStringLiteral("me@cluster-a's password:")});
    EXPECT_EQ(promptTitles, QStringList{QStringLiteral("Connect to me@cluster-a")});
    // The listing and its checkpoint marks.
    ASSERT_TRUE(homeRows.count(QStringLiteral("runs")));
    EXPECT_FALSE(homeRows[QStringLiteral("runs")].second);
    ASSERT_TRUE(homeRows.count(QStringLiteral(".ssh")));
    EXPECT_EQ(runsRows.size(), 6u);
    const std::pair<QString, bool> checkpoint{QStringLiteral("checkpoint"), true};
    EXPECT_EQ(runsRows[QStringLiteral("demo")],
              std::pair(QStringLiteral("checkpoint, link"), true));  // a DCP .metadata inside
    EXPECT_EQ(runsRows[QStringLiteral("hf")], checkpoint);           // safetensors inside
    EXPECT_EQ(runsRows[QStringLiteral("iter_0000100")], checkpoint); // mp_rank_* inside
    EXPECT_EQ(runsRows[QStringLiteral("weights.pt")], checkpoint);
    EXPECT_EQ(runsRows[QStringLiteral("plain")], std::pair(QString(), false));
    EXPECT_EQ(runsRows[QStringLiteral("notes.txt")], std::pair(QString(), false));
    EXPECT_TRUE(browseStatus.contains(QStringLiteral("6 entries; 4 look like a checkpoint")))
        << browseStatus.toStdString();
    EXPECT_EQ(QFileInfo(afterUp).canonicalFilePath(), QFileInfo(home).canonicalFilePath());
    EXPECT_EQ(QFileInfo(chosenPath).canonicalFilePath(), QFileInfo(Demo).canonicalFilePath());
    EXPECT_TRUE(reused) << "Browse's connection was not kept for Open";

    // Open made a window on the remote demo, in Browse's connection: no second prompt.
    MainWindow *window = nullptr;
    ASSERT_TRUE(waitFor(
        [&] {
            for (QWidget *w : QApplication::topLevelWidgets())
                if (auto *m = qobject_cast<MainWindow *>(w); m && m->session()->index())
                    window = m;
            return window != nullptr;
        },
        60'000));
    EXPECT_EQ(window->session()->location(), QStringLiteral("me@cluster-a"));
    EXPECT_TRUE(window->windowTitle().contains(QStringLiteral("me@cluster-a")))
        << window->windowTitle().toStdString();
    EXPECT_EQ(prompts.size(), 1);
    EXPECT_EQ(recentRemoteLocations().value(0), QStringLiteral("me@cluster-a:") + chosenPath);
    EXPECT_EQ(remoteServerFor(QStringLiteral("me@cluster-a")), Cli);
}

// ssh's prompt answered wrongly, or refused (Cancel), fails the connection with ssh's own line.
TEST_F(RemoteGui, AWrongOrRefusedPasswordFailsInOneLine)
{
    askPassword(QStringLiteral("Password: "), QStringLiteral("right"));
    for (const bool refuse : {false, true}) {
        SCOPED_TRACE(refuse ? "refused" : "wrong");
        int asked = 0;
        Driver driver;
        driver.on<QInputDialog>([&](QInputDialog *d) {
            ++asked;
            d->setTextValue(QStringLiteral("wrong"));
            refuse ? d->reject() : d->accept();
        });
        QString error;
        EXPECT_EQ(connectTo(QStringLiteral("cluster"), &error), nullptr);
        EXPECT_EQ(driver.messages, QStringList());
        EXPECT_EQ(asked, 1);
        EXPECT_TRUE(error.contains(refuse ? QStringLiteral("askpass refused")
                                          : QStringLiteral("wrong answer")))
            << error.toStdString();
        EXPECT_FALSE(error.contains(QLatin1Char('\n'))) << error.toStdString();
    }
}

// Compare With… a checkpoint on a host, from a window on this computer: ssh's password asked
// in the window, as Open Remote… asks it, and the server the one last used with that host.
TEST_F(RemoteGui, ACompareOnAHostAsksItsPromptInTheWindow)
{
    addRecentRemoteLocation(QStringLiteral("me@cluster-c"), QStringLiteral("/elsewhere"), Cli);
    askPassword(QStringLiteral("me@cluster-c's password: "), QStringLiteral("s3cret"));
    QStringList prompts;
    Driver driver;
    driver.on<QInputDialog>([&](QInputDialog *d) {
        prompts << d->labelText();
        d->setTextValue(QStringLiteral("s3cret"));
        d->accept();
    });
    auto *w = new MainWindow;
    w->resize(1366, 768);
    w->show();
    model::CheckpointSession *s = w->session();
    w->openPath(Demo);
    ASSERT_TRUE(waitFor([&] { return s->index() && !s->isJobRunning(); }, 60'000));
    s->openCompare(QStringLiteral("me@cluster-c:") + Demo);
    ASSERT_TRUE(waitFor([&] { return s->compareIndex() && !s->isJobRunning(); }, 60'000))
        << driver.messages.join(QLatin1Char('|')).toStdString();
    EXPECT_EQ(prompts, QStringList{QStringLiteral("me@cluster-c's password:")});
    EXPECT_EQ(s->compareLocation(), QStringLiteral("me@cluster-c"));
    EXPECT_EQ(driver.messages, QStringList());
}

// Browsing confined to listing: a FIFO is listed as a special file and never opened (the
// server would hang on it), a path that is not a directory lists its directory, one that is
// not there says so.
TEST_F(RemoteGui, TheBrowserListsWithoutOpeningFiles)
{
    auto backend = connectTo(QStringLiteral("cluster"));
    ASSERT_NE(backend, nullptr);
    const QString dir = home + QStringLiteral("/d");
    ASSERT_TRUE(QDir().mkpath(dir));
    ASSERT_EQ(::mkfifo(QFile::encodeName(dir + QStringLiteral("/fifo")).constData(), 0600), 0);
    touch(dir + QStringLiteral("/a.bin"));
    RemoteBrowser browser(backend->session(), QStringLiteral("cluster"),
                          dir + QStringLiteral("/a.bin"));
    ASSERT_TRUE(waitFor([&] { return !browser.listing(); }, 30'000));
    EXPECT_EQ(browser.directory(), QFileInfo(dir).canonicalFilePath());
    auto listed = rows(&browser);
    EXPECT_EQ(listed[QStringLiteral("fifo")], std::pair(QStringLiteral("special file"), false));
    EXPECT_EQ(listed[QStringLiteral("a.bin")], std::pair(QStringLiteral("checkpoint"), true));
    browser.showDirectory(dir + QStringLiteral("/nothing-here"));
    ASSERT_TRUE(waitFor([&] { return !browser.listing(); }, 30'000));
    EXPECT_TRUE(browser.findChild<QLabel *>(QStringLiteral("status"))
                    ->text()
                    .contains(QStringLiteral("No such file")));
    EXPECT_EQ(browser.directory(), QFileInfo(dir).canonicalFilePath()); // still shown
}

// The Verify panel of a remote window offers where it runs: on the host's threads or as a job
// (here torchrun, 2 ranks, as `--ssh … verify --launch torchrun --ranks 2`), kept per host; the
// job's result comes back (two ranks), and Cancel stops a hung job with none of its ranks left.
// A local window offers none of it.
TEST_F(RemoteGui, VerifyRunsAsAJobFromTheWindowAndCancelStopsIt)
{
#ifdef SHARDSCOPE_TEST_PYTHON
    // torchrun where the "remote" server looks for it (its PATH).
    env.set("PATH", QFile::encodeName(QFileInfo(QStringLiteral(SHARDSCOPE_TEST_PYTHON)).path()) +
                        ':' + qgetenv("PATH"));
#endif
    {
        MainWindow local;
        auto *panel = local.findChild<widgets::VerifyPanel *>();
        ASSERT_NE(panel, nullptr);
        EXPECT_TRUE(panel->findChild<QComboBox *>(QStringLiteral("launcher"))->isHidden() ||
                    !panel->findChild<QComboBox *>(QStringLiteral("launcher"))->isVisibleTo(panel));
        EXPECT_EQ(panel->launch().launcher, RemoteLaunch::Launcher::None);
    }
    auto backend = connectTo(QStringLiteral("cluster"));
    ASSERT_NE(backend, nullptr);
    if (!backend->session()->server().torchrun)
        GTEST_SKIP() << "no torchrun on the server's PATH";
    auto *window = new MainWindow(backend);
    window->show();
    auto *panel = window->findChild<widgets::VerifyPanel *>();
    ASSERT_NE(panel, nullptr);
    auto *launcher = panel->findChild<QComboBox *>(QStringLiteral("launcher"));
    auto *ranks = panel->findChild<QSpinBox *>(QStringLiteral("ranks"));
    ASSERT_NE(launcher, nullptr);
    ASSERT_NE(ranks, nullptr);
    EXPECT_TRUE(launcher->isVisibleTo(panel));
    EXPECT_EQ(launcher->itemText(0), QStringLiteral("on cluster's threads"));
    launcher->setCurrentIndex(launcher->findData(int(RemoteLaunch::Launcher::Torchrun)));
    ranks->setValue(2);
    // Slurm's options are off for torchrun, which runs on the server's node.
    EXPECT_FALSE(panel->findChild<QSpinBox *>(QStringLiteral("nodes"))->isEnabled());
    EXPECT_FALSE(panel->findChild<QLineEdit *>(QStringLiteral("partition"))->isEnabled());
    const RemoteLaunch kept = remoteLaunchFor(QStringLiteral("cluster"));
    EXPECT_EQ(kept.launcher, RemoteLaunch::Launcher::Torchrun);
    EXPECT_EQ(kept.ranks, 2);

    model::CheckpointSession *s = window->session();
    window->openPath(Demo);
    window->setConfigPath(Demo + QStringLiteral("/config.json"));
    ASSERT_TRUE(waitFor([&] { return s->diff() && !s->isJobRunning(); }));
    panel->run();
    ASSERT_TRUE(waitFor([&] { return s->verification() && !s->isJobRunning(); }, 180'000));
    EXPECT_EQ(s->verification()->result.world, 2);
    RecordProperty("summary",
                   panel->findChild<QLabel *>(QStringLiteral("summary"))->text().toStdString());
    EXPECT_TRUE(panel->findChild<QLabel *>(QStringLiteral("summary"))
                    ->text()
                    .contains(QStringLiteral("2 ranks")));

    // A job whose ranks hang (stopped), cancelled from the panel.
    const pid_t server = pid_t(backend->session()->server().pid);
    panel->run();
    std::vector<pid_t> hung;
    ASSERT_TRUE(waitFor([&] { return (hung = procs::launchedRanks(server)).size() >= 2; }, 60'000));
    for (pid_t p : hung)
        ::kill(p, SIGSTOP);
    QPushButton *cancel = nullptr;
    for (QPushButton *b : panel->findChildren<QPushButton *>())
        if (b->text() == QStringLiteral("Cancel"))
            cancel = b;
    ASSERT_TRUE(cancel && cancel->isVisible());
    QTest::mouseClick(cancel, Qt::LeftButton);
    ASSERT_TRUE(waitFor([&] { return !s->isJobRunning(); }, 30'000));
    EXPECT_TRUE(waitFor(
        [&] {
            return std::none_of(hung.begin(), hung.end(),
                                [](pid_t p) { return procs::running(p); });
        },
        15'000))
        << "a rank of the cancelled job is still running";
    EXPECT_EQ(s->verification()->result.world, 2); // the finished one stays shown
    EXPECT_TRUE(s->connected());

    // A new window on the same host starts where this one left off.
    MainWindow again(backend);
    auto *again_panel = again.findChild<widgets::VerifyPanel *>();
    EXPECT_EQ(again_panel->launch().launcher, RemoteLaunch::Launcher::Torchrun);
    EXPECT_EQ(again_panel->launch().ranks, 2);
}
