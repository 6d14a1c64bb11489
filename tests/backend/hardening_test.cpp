// SPDX-License-Identifier: MIT
// Escaped output (shardscope/escape.h), whole-or-nothing writes (shardscope/writefile.h) and
// reads of files changed under the reader.
#include "read/mappedfile.h"

#include <shardscope/escape.h>
#include <shardscope/writefile.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace shardscope;

namespace {

// Every byte value, the sequences terminals act on, the characters that hide or reorder text,
// and what shells expand.
std::vector<std::string> hostileStrings()
{
    std::vector<std::string> out = {
        "plain.weight",
        "",
        "\x1b]0;title\x07\x1b[31mred\nproblem: fake\r",
        "a\u202eb\u2066c\u200bd\ufeffe\u2028f",
        "c1:\xc2\x85\xc2\x9b",
        "bad\xff\xfe\xed\xa0\x80\xc0\xaf",
        "$(touch pwned) `id` ${HOME} 'single' \"double\" \\back ! * ? ~ # & ; | < >",
        "\xe6\x97\xa5\xe6\x9c\xac.weight", // Japanese: printable, kept
        std::string("nul\0inside", 10),
    };
    std::string bytes;
    for (int c = 1; c < 256; ++c)
        bytes += char(c);
    out.push_back(bytes);
    return out;
}

bool terminalSafe(std::string_view s)
{
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f)
            return false;
    // No C1 control, bidi or zero-width character, no invalid UTF-8 is left.
    return !needsEscape(s);
}

std::string runShell(const std::string &command)
{
    std::string out;
    if (FILE *p = popen(command.c_str(), "r")) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, p)) > 0)
            out.append(buf, n);
        pclose(p);
    }
    return out;
}

} // namespace

TEST(Escape, TextIsOneSafeLineAndKeepsPlainText)
{
    for (const std::string &s : hostileStrings()) {
        EXPECT_TRUE(terminalSafe(visibleText(s))) << visibleText(s);
        EXPECT_TRUE(terminalSafe(visibleName(s))) << visibleName(s);
    }
    EXPECT_EQ(visibleText("model.layers.0.weight"), "model.layers.0.weight");
    EXPECT_EQ(visibleText("a\"b\\c"), "a\"b\\c"); // messages keep their quotes
    EXPECT_EQ(visibleText("\x1b[31m\n\xff\xe2\x80\xae"), "\\x1b[31m\\n\\xff\\u202e");
    EXPECT_EQ(visibleText("\xe6\x97\xa5"), "\xe6\x97\xa5");
    EXPECT_EQ(visibleLines("a\nb\tc\rd"), "a\nb\tc\\rd");
}

TEST(Escape, NamesPrintApart)
{
    // A name holding the escape's own spelling must not print like the escaped one.
    EXPECT_NE(visibleName("a\nb"), visibleName("a\\nb"));
    EXPECT_NE(visibleName("\"a\""), visibleName("a"));
    EXPECT_EQ(visibleName("model.weight"), "model.weight");
    EXPECT_EQ(visibleName("a\nb"), "\"a\\nb\"");
    EXPECT_EQ(visibleName(""), "\"\"");
}

// bash reads every quoted word back as the exact bytes, and expands nothing.
TEST(Escape, ShellQuoteRoundTripsThroughBash)
{
    if (std::system("command -v bash > /dev/null 2>&1") != 0)
        GTEST_SKIP() << "no bash";
    const fs::path dir =
        fs::temp_directory_path() / ("shardscope-quote-" + std::to_string(getpid()));
    fs::create_directories(dir);
    for (const std::string &raw : hostileStrings()) {
        if (raw.find('\0') != std::string::npos)
            continue; // no argument can hold NUL
        const std::string quoted = shellQuote(raw);
        EXPECT_TRUE(terminalSafe(quoted)) << quoted;
        const std::string got =
            runShell("cd '" + dir.string() + "' && bash -c \"printf '%s' \"" + shellQuote(quoted));
        EXPECT_EQ(got, raw) << quoted;
    }
    EXPECT_FALSE(fs::exists(dir / "pwned"));
    EXPECT_EQ(shellQuote("model.layers.0"), "model.layers.0");
    EXPECT_EQ(shellQuote("a b"), "'a b'");
    fs::remove_all(dir);
}

class WriteFile : public ::testing::Test
{
protected:
    void SetUp() override
    {
        m_dir = fs::temp_directory_path() / ("shardscope-write-" + std::to_string(getpid()));
        fs::remove_all(m_dir);
        fs::create_directories(m_dir);
    }
    void TearDown() override { fs::remove_all(m_dir); }
    static std::string read(const fs::path &p)
    {
        std::ifstream in(p, std::ios::binary);
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }
    size_t entries() const
    {
        return size_t(std::distance(fs::directory_iterator(m_dir), fs::directory_iterator()));
    }
    fs::path m_dir;
};

TEST_F(WriteFile, ReplacesWholeAndKeepsTheMode)
{
    const fs::path p = m_dir / "report.md";
    ASSERT_FALSE(writeFileAtomically(p.string(), "first"));
    EXPECT_EQ(read(p), "first");
    ::chmod(p.c_str(), 0640);
    ASSERT_FALSE(writeFileAtomically(p.string(), "second, longer"));
    EXPECT_EQ(read(p), "second, longer");
    struct stat st;
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u);
    EXPECT_EQ(entries(), 1u); // no temporary file left
}

// A write that fails partway (a file size limit: what a full disk does to a write) leaves the
// previous file whole and no temporary file, and says which file.
TEST_F(WriteFile, FailedWriteLeavesThePreviousFile)
{
    const fs::path p = m_dir / "layout.json";
    ASSERT_FALSE(writeFileAtomically(p.string(), "previous"));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::signal(SIGXFSZ, SIG_IGN);
        rlimit limit{4096, 4096};
        setrlimit(RLIMIT_FSIZE, &limit);
        const auto error = writeFileAtomically(p.string(), std::string(1 << 20, 'x'));
        _exit(error && error->toString().find(p.string()) != std::string::npos ? 7 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7); // failed, naming the file
    EXPECT_EQ(read(p), "previous");
    EXPECT_EQ(entries(), 1u);
}

TEST_F(WriteFile, MissingDirectoryIsAnError)
{
    const auto error = writeFileAtomically((m_dir / "no" / "such.md").string(), "x");
    ASSERT_TRUE(error);
    EXPECT_NE(error->toString().find("such.md"), std::string::npos);
}

// A data file cut after it was mapped (a rewrite while a job runs): the read of a range that is
// gone fails naming the file and offset instead of touching the mapping (SIGBUS).
TEST_F(WriteFile, MappedFileCutAfterOpeningFailsTheRead)
{
    const fs::path p = m_dir / "__0_0.distcp";
    ASSERT_FALSE(writeFileAtomically(p.string(), std::string(1 << 16, 'x')));
    auto f = detail::MappedFile::open(p.string(), false, true);
    ASSERT_TRUE(f);
    ASSERT_TRUE((*f)->range(60000, 4096));
    ASSERT_EQ(::truncate(p.c_str(), 1000), 0);
    auto gone = (*f)->range(60000, 4096);
    ASSERT_FALSE(gone);
    EXPECT_NE(gone.error().toString().find("__0_0.distcp"), std::string::npos);
    EXPECT_NE(gone.error().toString().find("shrank to 1000 bytes"), std::string::npos);
    EXPECT_EQ(gone.error().offset, 60000u);
    EXPECT_TRUE((*f)->range(0, 1000)); // what is still there reads
}
