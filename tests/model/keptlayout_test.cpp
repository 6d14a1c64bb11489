// SPDX-License-Identifier: MIT
// KeptLayout: a generated layout copied where a report or repair names it, and what the path
// held before back when the job writes nothing; never another job's file written since.
#include "model/keptlayout.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>

#include <gtest/gtest.h>

#include <cstdio>

using namespace shardscope::model;

namespace {

QByteArray read(const QString &path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void write(const QString &path, const QByteArray &content)
{
    QFile f(path);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write(content);
}

struct KeptLayoutTest : ::testing::Test
{
    QTemporaryDir dir;
    QString generated = dir.filePath(QStringLiteral("window-layout.json"));
    QString kept = dir.filePath(QStringLiteral("fixed.layout.json"));
    void SetUp() override { write(generated, "{\"new\": 1}"); }
    QStringList leftOver() const
    {
        return QDir(dir.path()).entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot);
    }
};

} // namespace

TEST_F(KeptLayoutTest, AJobThatWritesNothingPutsTheEarlierFileBack)
{
    write(kept, "{\"earlier\": 1}");
    {
        KeptLayout beside;
        ASSERT_FALSE(beside.copy(generated, kept));
        EXPECT_EQ(read(kept), "{\"new\": 1}"); // what the job's command will name
        beside.undo();
    }
    EXPECT_EQ(read(kept), "{\"earlier\": 1}");
    {
        KeptLayout beside; // gone without keep(): a job that returned early
        ASSERT_FALSE(beside.copy(generated, kept));
    }
    EXPECT_EQ(read(kept), "{\"earlier\": 1}");
    EXPECT_EQ(leftOver().size(), 2) << leftOver().join(QLatin1Char(' ')).toStdString();
}

TEST_F(KeptLayoutTest, ACopyWithNothingBeforeItGoesWithAFailedJob)
{
    {
        KeptLayout beside;
        ASSERT_FALSE(beside.copy(generated, kept));
        EXPECT_TRUE(QFile::exists(kept));
    }
    EXPECT_FALSE(QFile::exists(kept));
    EXPECT_EQ(leftOver(), QStringList{QStringLiteral("window-layout.json")});
}

TEST_F(KeptLayoutTest, AWrittenJobKeepsItsCopy)
{
    write(kept, "{\"earlier\": 1}");
    {
        KeptLayout beside;
        ASSERT_FALSE(beside.copy(generated, kept));
        beside.keep();
    }
    EXPECT_EQ(read(kept), "{\"new\": 1}");
}

// Another job (another window, another process) wrote the path since: its file stays.
TEST_F(KeptLayoutTest, AnotherJobsFileWrittenSinceIsLeftAlone)
{
    for (bool before : {false, true}) {
        if (before)
            write(kept, "{\"earlier\": 1}");
        KeptLayout beside;
        ASSERT_FALSE(beside.copy(generated, kept));
        const QString other = dir.filePath(QStringLiteral("other.json"));
        write(other, "{\"other\": 1}");
        ASSERT_EQ(
            std::rename(QFile::encodeName(other).constData(), QFile::encodeName(kept).constData()),
            0);
        beside.undo();
        EXPECT_EQ(read(kept), "{\"other\": 1}") << before;
    }
}

TEST_F(KeptLayoutTest, SomethingElseInTheWayIsNamedAndLeftAsItIs)
{
    ASSERT_TRUE(QDir(dir.path()).mkdir(QStringLiteral("fixed.layout.json")));
    KeptLayout beside;
    const auto error = beside.copy(generated, kept);
    ASSERT_TRUE(error);
    EXPECT_NE(error->toString().find("fixed.layout.json"), std::string::npos) << error->toString();
    EXPECT_EQ(error->toString().find('\n'), std::string::npos);
    EXPECT_TRUE(QFileInfo(kept).isDir());
}
