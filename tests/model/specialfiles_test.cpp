// SPDX-License-Identifier: MIT
// The window's reader never blocks on a file that is not regular: a FIFO, a socket, a character
// device (a symlink to /dev/zero or /dev/urandom) or a block device standing in for a torch.save
// file, a DCP `.metadata`, a DCP data file or a layout is refused in one line naming it.
#include "model/checkpointsession.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <gtest/gtest.h>

#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

using namespace shardscope;
using namespace shardscope::model;

namespace {

// A refusal is immediate; a read that blocked would wait forever.
constexpr int Timeout = 20'000;

struct Kind
{
    const char *name;
    const char *target; ///< a device to link to; null: made in place
};

// The first block device in /dev that stat() sees as one, or empty.
std::string blockDevice()
{
    const QDir dev(QStringLiteral("/dev"));
    for (const QString &name : dev.entryList(QDir::System | QDir::NoDotAndDotDot)) {
        struct stat st
        {
        };
        const std::string path = QFile::encodeName(dev.filePath(name)).toStdString();
        if (::stat(path.c_str(), &st) == 0 && S_ISBLK(st.st_mode))
            return path;
    }
    return {};
}

// Replaces `path` by a file of `kind`; false (with the reason in `why`) when it cannot be made.
bool makeSpecial(const QString &path, const std::string &kind, std::string &why)
{
    QFile::remove(path);
    const std::string p = QFile::encodeName(path).toStdString();
    if (kind == "fifo")
        return ::mkfifo(p.c_str(), 0600) == 0 || (why = std::strerror(errno), false);
    if (kind == "socket") {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (fd < 0 || p.size() >= sizeof addr.sun_path)
            return (why = "no socket", false);
        std::memcpy(addr.sun_path, p.c_str(), p.size() + 1);
        const bool ok = ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0;
        ::close(fd); // the socket file stays
        return ok || (why = std::strerror(errno), false);
    }
    const std::string target = kind == "block" ? blockDevice() : kind;
    if (target.empty())
        return (why = "no block device in /dev", false);
    return ::symlink(target.c_str(), p.c_str()) == 0 || (why = std::strerror(errno), false);
}

// makeSpecial(), failing the test when it cannot, except for a block device: a container may
// have none to link to.
bool replaced(const QString &path, const std::string &kind)
{
    std::string why;
    if (makeSpecial(path, kind, why))
        return true;
    if (kind != "block")
        ADD_FAILURE() << "cannot make " << kind << ": " << why;
    return false;
}

// A reader that did block on a FIFO is let go (a writer opens and closes it), so that a failing
// test ends instead of hanging in the runner's destructor.
void releaseFifo(const QString &path)
{
    const int fd = ::open(QFile::encodeName(path).constData(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0)
        ::close(fd);
}

const std::vector<std::string> kKinds = {"fifo", "socket", "/dev/zero", "/dev/urandom", "block"};

void expectRefusal(const QString &error, const QString &file)
{
    EXPECT_FALSE(error.contains(QLatin1Char('\n'))) << error.toStdString();
    EXPECT_TRUE(error.contains(QFileInfo(file).fileName())) << error.toStdString();
    EXPECT_TRUE(error.contains(QStringLiteral("not a regular file"))) << error.toStdString();
}

class SpecialFilesTest : public ::testing::Test
{
protected:
    void SetUp() override
    {
        QString python = qEnvironmentVariable("SHARDSCOPE_PYTHON");
#ifdef SHARDSCOPE_TEST_PYTHON
        if (python.isEmpty())
            python = QStringLiteral(SHARDSCOPE_TEST_PYTHON);
#endif
        if (python.isEmpty())
            GTEST_SKIP() << "SHARDSCOPE_PYTHON is not set to a python with torch";
        ASSERT_TRUE(m_dir.isValid());
        QProcess p;
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(python,
                {QStringLiteral("-c"),
                 QStringLiteral("import sys, warnings, torch, torch.distributed.checkpoint as dcp\n"
                                "warnings.filterwarnings('ignore')\n"
                                "sd = {'w': torch.arange(12.).reshape(3, 4)}\n"
                                "torch.save(sd, sys.argv[1] + '/model.pt')\n"
                                "dcp.save(sd, checkpoint_id=sys.argv[1] + '/dcp')\n"),
                 m_dir.path()});
        ASSERT_TRUE(p.waitForFinished(120'000) && p.exitCode() == 0) << p.readAll().toStdString();
        m_layout = m_dir.filePath(QStringLiteral("layout.json"));
        QFile layout(m_layout);
        ASSERT_TRUE(layout.open(QIODevice::WriteOnly));
        layout.write(R"({"schema": "shardscope.layout/1", "params": []})");
        // The layout that expects what the checkpoints hold.
        m_wLayout = m_dir.filePath(QStringLiteral("w-layout.json"));
        QFile w(m_wLayout);
        ASSERT_TRUE(w.open(QIODevice::WriteOnly));
        w.write(R"({"schema": "shardscope.layout/1", "family": "test", "source": "test",
                    "params": [{"name": "w", "shape": [3, 4], "dtype": "float32",
                                "tp_dim": -1}]})");
    }

    QString dataFile() const
    {
        const QDir dcp(m_dir.filePath(QStringLiteral("dcp")));
        const QStringList data = dcp.entryList({QStringLiteral("*.distcp")}, QDir::Files);
        return data.isEmpty() ? QString() : dcp.filePath(data.front());
    }

    QTemporaryDir m_dir;
    QString m_layout, m_wLayout;
};

} // namespace

// A torch.save file and a DCP `.metadata`: the open fails at once, naming the file.
TEST_F(SpecialFilesTest, OpenRefusesTheCheckpointFileUnread)
{
    const QString metadata = m_dir.filePath(QStringLiteral("dcp/.metadata"));
    for (const QString &file : {m_dir.filePath(QStringLiteral("model.pt")), metadata})
        for (const std::string &kind : kKinds) {
            SCOPED_TRACE(QFileInfo(file).fileName().toStdString() + " as " + kind);
            if (!replaced(file, kind))
                continue;
            CheckpointSession session;
            QSignalSpy failed(&session, &CheckpointSession::openFailed);
            session.open(file == metadata ? QFileInfo(file).absolutePath() : file);
            const bool refused = failed.wait(Timeout);
            releaseFifo(file);
            ASSERT_TRUE(refused) << "the open did not end";
            expectRefusal(failed.at(0).at(1).toString(), file);
        }
}

// A DCP data file: the checkpoint opens (its keys are in `.metadata`), the file's keys are marked
// unreadable, and reading a tensor fails at once naming the file.
TEST_F(SpecialFilesTest, DataFileIsAProblemAndItsTensorsFailUnread)
{
    const QString data = dataFile();
    ASSERT_FALSE(data.isEmpty());
    for (const std::string &kind : kKinds) {
        SCOPED_TRACE(kind);
        if (!replaced(data, kind))
            continue;
        CheckpointSession session;
        QSignalSpy opened(&session, &CheckpointSession::opened);
        session.open(m_dir.filePath(QStringLiteral("dcp")));
        ASSERT_TRUE(opened.wait(Timeout));
        const IndexSnapshot index = opened.at(0).at(0).value<IndexSnapshot>();
        ASSERT_TRUE(index);
        ASSERT_FALSE(index->problems.empty());
        const Problem &problem = index->problems.front();
        EXPECT_EQ(problem.key, "w");
        EXPECT_EQ(problem.effect, Problem::Effect::Unreadable);
        expectRefusal(QString::fromStdString(problem.file + ": " + problem.message), data);

        QSignalSpy ready(&session, &CheckpointSession::tensorDetailsReady);
        session.requestTensorDetails(QStringLiteral("w"));
        const bool answered = ready.wait(Timeout);
        releaseFifo(data);
        ASSERT_TRUE(answered) << "the read did not end";
        const auto details = ready.at(0).at(0).value<TensorDetails>();
        EXPECT_FALSE(details.ok());
        expectRefusal(details.error, data);

        // The load diff's fix says to put the data file back: nothing was cut short.
        QSignalSpy diffs(&session, &CheckpointSession::diffChanged);
        session.setLayout(m_wLayout);
        session.runDiff();
        const bool diffed = diffs.wait(Timeout) && session.diff();
        releaseFifo(data);
        ASSERT_TRUE(diffed);
        ASSERT_EQ(session.diff()->entries.size(), 1u);
        const DiffEntry &e = session.diff()->entries.front();
        EXPECT_EQ(e.status, LoadStatus::Unreadable);
        EXPECT_TRUE(QString::fromStdString(e.fix).contains(QFileInfo(data).fileName())) << e.fix;
        EXPECT_EQ(e.fix.find("cut short"), std::string::npos) << e.fix;
    }
}

// A layout (the diff reads it) and a model config (the layout job reads it): the job fails at
// once, naming the file.
TEST_F(SpecialFilesTest, LayoutAndConfigAreRefusedUnread)
{
    const QString config = m_dir.filePath(QStringLiteral("config.json"));
    for (const QString &file : {m_layout, config})
        for (const std::string &kind : kKinds) {
            SCOPED_TRACE(QFileInfo(file).fileName().toStdString() + " as " + kind);
            if (!replaced(file, kind))
                continue;
            CheckpointSession session;
            QSignalSpy opened(&session, &CheckpointSession::opened);
            QSignalSpy ended(&session, &CheckpointSession::jobEnded);
            session.open(m_dir.filePath(QStringLiteral("model.pt")));
            ASSERT_TRUE(opened.wait(Timeout));
            ended.clear(); // the open's own
            if (file == config) {
                session.setConfig(config);
            } else {
                session.setLayout(file);
                session.runDiff();
            }
            const bool done = ended.count() > 0 || ended.wait(Timeout);
            releaseFifo(file);
            ASSERT_TRUE(done) << "the job did not end";
            EXPECT_FALSE(ended.at(0).at(1).toBool());
            expectRefusal(ended.at(0).at(2).toString(), file);
        }
}
