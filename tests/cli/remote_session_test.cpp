// SPDX-License-Identifier: MIT
// RemoteSession, the client object a face puts behind its session: every call gives what the
// same call of the front door gives here, on the bundled demo. Run by tools/check_remote.py,
// which says where the server is: SHARDSCOPE_SSH (the loopback transport or a real ssh with a
// throwaway sshd's config), SHARDSCOPE_TEST_HOST, SHARDSCOPE_TEST_CLI (the server),
// SHARDSCOPE_TEST_DEMO and SHARDSCOPE_TEST_LAYOUT; SHARDSCOPE_TEST_PASSPHRASE when the key
// asks for one (answered by the session's prompt hook).
#include <shardscope/remote.h>
#include <shardscope/report.h>
#include <shardscope/session.h>
#include <shardscope/tensor.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <regex>

using namespace shardscope;

namespace {

std::string env(const char *name, const char *fallback = "")
{
    const char *v = std::getenv(name);
    return v ? v : fallback;
}

struct Prompts
{
    std::mutex mutex;
    std::vector<std::string> seen;
};

RemoteTarget target()
{
    RemoteTarget t;
    t.host = env("SHARDSCOPE_TEST_HOST", "cluster");
    t.server = env("SHARDSCOPE_TEST_CLI", "shardscope-cli");
    return t;
}

Result<std::shared_ptr<RemoteSession>> connectTo(Prompts *prompts = nullptr)
{
    RemoteConnectOptions options;
    const std::string passphrase = env("SHARDSCOPE_TEST_PASSPHRASE");
    if (!passphrase.empty() || prompts)
        options.askpass = [passphrase, prompts](const std::string &prompt) {
            if (prompts) {
                std::lock_guard lock(prompts->mutex);
                prompts->seen.push_back(prompt);
            }
            return std::optional<std::string>(passphrase);
        };
    options.timeoutSeconds = 60;
    return RemoteSession::connect(target(), options);
}

class Remote : public ::testing::Test
{
protected:
    void SetUp() override
    {
        if (env("SHARDSCOPE_TEST_DEMO").empty())
            GTEST_SKIP() << "run by tools/check_remote.py, which says where the server is";
        demo = env("SHARDSCOPE_TEST_DEMO");
        layoutPath = env("SHARDSCOPE_TEST_LAYOUT");
        auto s = connectTo();
        ASSERT_TRUE(s) << s.error().toString();
        session = *s;
        auto l = readLayout(layoutPath);
        ASSERT_TRUE(l) << l.error().toString();
        layout = std::make_shared<const Layout>(std::move(*l));
    }
    std::string demo, layoutPath;
    std::shared_ptr<RemoteSession> session;
    std::shared_ptr<const Layout> layout;
};

std::string withoutSeconds(std::string json)
{
    return std::regex_replace(json, std::regex("\"seconds\": [0-9.e+-]+"), "\"seconds\": S");
}

} // namespace

TEST_F(Remote, TheServerSaysWhatItIs)
{
    const RemoteServerInfo &info = session->server();
    EXPECT_EQ(info.major, 1);
    EXPECT_FALSE(info.version.empty());
    EXPECT_GT(info.pid, 0);
    EXPECT_GE(info.threads, 1);
    EXPECT_LE(info.threads, 8);
    EXPECT_EQ(session->where("/ckpt"), target().host + ":/ckpt");
    EXPECT_TRUE(session->connected());
}

TEST_F(Remote, AnOpenedIndexIsTheIndexOpenedHere)
{
    auto remote = session->open(demo);
    ASSERT_TRUE(remote) << remote.error().toString();
    InspectRequest all;
    all.path = demo;
    auto here = runInspect(all);
    ASSERT_TRUE(here);
    all.opened = *remote;
    auto there = session->runInspect(all);
    ASSERT_TRUE(there) << there.error().toString();
    EXPECT_EQ(there->index, *remote); // no second index travelled
    EXPECT_EQ(inspectToJson(*there, demo), inspectToJson(*here, demo));
    // The index itself: its problems (the integrity checks' too) and every entry.
    auto whole = [this](const OpenedIndex &index) {
        InspectResult r;
        r.index = index;
        for (const TensorEntry &t : index->tensors)
            r.tensors.push_back({&t, std::nullopt, {}, {}});
        for (const ObjectEntry &o : index->objects)
            r.objects.push_back({&o, {}});
        r.problems = index->problems;
        return inspectToJson(r, demo);
    };
    EXPECT_EQ(whole(*remote), whole(here->index));
    // The index travelled compressed: fewer bytes than its .metadata.
    EXPECT_LT(session->bytesReceived(), 700000u);
}

// Run by check_remote.py's compressed case, which says (SHARDSCOPE_TEST_KEYS_AHEAD) whether the
// server holds a persistent entry for the metadata as it is now: then the keys come ahead of the
// index and are the current ones; the index open() returns is always the one opened here.
TEST_F(Remote, TheKeysAheadAreCurrentAndTheIndexIsTheOneHere)
{
    const std::string ahead = env("SHARDSCOPE_TEST_KEYS_AHEAD");
    if (ahead.empty())
        GTEST_SKIP() << "run by tools/check_remote.py compressed";
    // What the tree shows: every entry's key, dtype, shape and chunks.
    auto entries = [](const CheckpointIndex &index) {
        std::string out;
        for (const TensorEntry &t : index.tensors) {
            out += t.key.str() + " " + t.dtypeName + " [";
            for (int64_t d : t.shape)
                out += std::to_string(d) + ",";
            out += "]";
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                for (size_t d = 0; d < t.ndim(); ++d)
                    out += " " + std::to_string(t.chunkOffsets(c)[d]) + "+" +
                           std::to_string(t.chunkSizes(c)[d]);
                const Location &l = t.chunks[c];
                out += " @" + std::to_string(l.file) + ":" + std::to_string(l.offset) + "+" +
                       std::to_string(l.length);
            }
            out += "\n";
        }
        for (const ObjectEntry &o : index.objects)
            out += o.key.str() + "\n";
        return out;
    };
    std::optional<std::string> keys;
    auto remote = session->open(demo, {}, [&](const CheckpointIndex &k) { keys = entries(k); });
    ASSERT_TRUE(remote) << remote.error().toString();
    auto here = openCheckpoint(demo);
    ASSERT_TRUE(here) << here.error().toString();
    EXPECT_EQ(keys.has_value(), ahead == "1");
    if (keys) {
        EXPECT_EQ(*keys, entries(*here));
    }
    InspectRequest all;
    all.path = demo;
    auto inspected = runInspect(all);
    ASSERT_TRUE(inspected);
    auto whole = [this](const OpenedIndex &index) {
        InspectResult r;
        r.index = index;
        for (const TensorEntry &t : index->tensors)
            r.tensors.push_back({&t, std::nullopt, {}, {}});
        for (const ObjectEntry &o : index->objects)
            r.objects.push_back({&o, {}});
        r.problems = index->problems;
        // Each side's own persistent index (this side's and the server's cache apart).
        return std::regex_replace(inspectToJson(r, demo), std::regex("\"index_cache\": \"[^\"]*\""),
                                  "\"index_cache\"");
    };
    EXPECT_EQ(whole(*remote), whole(inspected->index));
    EXPECT_EQ((*remote)->fileSizes, inspected->index->fileSizes);
}

TEST_F(Remote, ATensorsDetailsAreComputedThereAsHere)
{
    auto index = session->open(demo);
    ASSERT_TRUE(index);
    auto local = openCheckpoint(demo);
    ASSERT_TRUE(local);
    for (size_t i : {size_t(0), local->tensors.size() / 2, local->tensors.size() - 1}) {
        const TensorEntry &t = local->tensors[i];
        auto data = readTensor(*local, t);
        ASSERT_TRUE(data);
        auto health = tensorHealth(*data);
        ASSERT_TRUE(health);
        auto d = session->tensorDetails(*index, (*index)->tensors[i]);
        ASSERT_TRUE(d) << d.error().toString();
        ASSERT_TRUE(d->health);
        EXPECT_EQ(d->health->fingerprint, health->fingerprint);
        EXPECT_EQ(d->health->histogram, health->histogram);
        EXPECT_EQ(d->health->mean, health->mean);
        EXPECT_EQ(d->sha256, sha256Hex(*data));
        EXPECT_EQ(d->bytes, data->bytes.size());
    }
    // An entry of another index (here, the local one) is not one the server holds.
    auto foreign = session->tensorDetails(*index, local->tensors.front());
    ASSERT_FALSE(foreign);
    EXPECT_EQ(foreign.error().key, local->tensors.front().key.str());
    ASSERT_FALSE(local->objects.empty());
    const ObjectEntry &o = local->objects.front();
    auto value = readObject(*local, o);
    ASSERT_TRUE(value);
    auto there = session->readObject(*index, (*index)->objects.front());
    ASSERT_TRUE(there) << there.error().toString();
    EXPECT_EQ(there->summary(1000), value->summary(1000));
}

TEST_F(Remote, TheDiffAndItsItemNumbersAreTheLocalOnes)
{
    auto index = session->open(demo);
    ASSERT_TRUE(index);
    DiffRequest r{demo, layoutPath, {}, nullptr, layout, {}};
    r.options.disabledRules = {"mla_down_proj"};
    r.options.previewRepair = true;
    auto here = runDiff(r);
    ASSERT_TRUE(here);
    r.opened = *index;
    auto there = session->runDiff(r);
    ASSERT_TRUE(there) << there.error().toString();
    EXPECT_EQ(diffToJson(*there), diffToJson(*here));
    ASSERT_EQ(there->entries.size(), here->entries.size());
    for (size_t i = 0; i < here->entries.size(); ++i)
        for (size_t s = 0; s < here->entries[i].sources.size(); ++s) {
            const DiffSource &a = here->entries[i].sources[s], &b = there->entries[i].sources[s];
            EXPECT_EQ(a.entry, b.entry) << a.key;
            // The item number finds the key in the index that travelled.
            ASSERT_GE(b.entry, 0);
            EXPECT_EQ((*index)->itemKey(size_t(b.entry)), b.key);
        }
    EXPECT_TRUE(there->repair.has_value());
}

TEST_F(Remote, VerifyWithItsPlanAndProgressAsHere)
{
    VerifyRequest r;
    r.checkpoint = demo;
    r.layout = layoutPath;
    r.openedLayout = layout;
    r.dp = 2;
    r.threads = 1;
    auto here = runVerify(r);
    ASSERT_TRUE(here);
    std::vector<std::string> stages;
    JobControl control;
    control.progress = [&stages](const JobProgress &p) {
        if (stages.empty() || stages.back() != p.stage)
            stages.emplace_back(p.stage);
        return true;
    };
    auto there = session->runVerify(r, control);
    ASSERT_TRUE(there) << there.error().toString();
    EXPECT_EQ(withoutSeconds(verifyToJson(*there)), withoutSeconds(verifyToJson(*here)));
    ASSERT_TRUE(there->plan);
    EXPECT_EQ(there->plan->ranks.size(), here->plan->ranks.size());
    for (size_t i = 0; i < here->plan->ranks.size(); ++i)
        EXPECT_EQ(there->plan->ranks[i].reads.size(), here->plan->ranks[i].reads.size());
    EXPECT_NE(std::find(stages.begin(), stages.end(), "verify"), stages.end());
}

TEST_F(Remote, AProgressThatSaysStopCancelsAsHere)
{
    VerifyRequest r;
    r.checkpoint = demo;
    r.layout = layoutPath;
    r.openedLayout = layout;
    r.dp = 2;
    r.threads = 1;
    // Stopped at its first progress, whatever the stage, with the whole job still ahead (one
    // thread): the cancel travels while the server goes on, and one said at the verify stage of
    // the small demo could find it done under load (seen in CI).
    JobControl control;
    control.progress = [](const JobProgress &) { return false; };
    auto there = session->runVerify(r, control);
    ASSERT_TRUE(there) << there.error().toString();
    EXPECT_TRUE(there->result.cancelled);
    // The session goes on.
    auto index = session->open(demo);
    EXPECT_TRUE(index) << index.error().toString();
}

TEST_F(Remote, CallsFromSeveralThreadsInterleave)
{
    auto index = session->open(demo);
    ASSERT_TRUE(index);
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            const TensorEntry &e = (*index)->tensors[size_t(t) % (*index)->tensors.size()];
            if (session->tensorDetails(*index, e))
                ++ok;
        });
    for (std::thread &t : threads)
        t.join();
    EXPECT_EQ(ok.load(), 4);
}

TEST_F(Remote, ADroppedConnectionIsAnErrorAndAReconnectWorks)
{
    auto index = session->open(demo);
    ASSERT_TRUE(index);
    ASSERT_EQ(::kill(pid_t(session->server().pid), SIGKILL), 0);
    auto after = session->tensorDetails(*index, (*index)->tensors.front());
    ASSERT_FALSE(after);
    EXPECT_NE(after.error().message.find("was lost"), std::string::npos) << after.error().message;
    EXPECT_EQ(after.error().message.find('\n'), std::string::npos);
    EXPECT_FALSE(session->connected());
    // What the caller holds stays; a new session goes on.
    EXPECT_FALSE((*index)->tensors.empty());
    auto again = connectTo();
    ASSERT_TRUE(again) << again.error().toString();
    auto reopened = (*again)->open(demo);
    ASSERT_TRUE(reopened) << reopened.error().toString();
    EXPECT_EQ((*reopened)->tensors.size(), (*index)->tensors.size());
}

// A face's file browser: a directory's entries as the file system says, what looks like a
// checkpoint marked; no request reads a file's bytes (the confined case runs this under strace).
TEST_F(Remote, ADirectoryIsListedAsTheFileSystemSays)
{
    namespace fs = std::filesystem;
    const fs::path dir = fs::canonical(demo);
    auto parent = session->listDirectory(dir.parent_path().string());
    ASSERT_TRUE(parent) << parent.error().toString();
    EXPECT_EQ(parent->path, dir.parent_path().string());
    auto it = std::find_if(parent->entries.begin(), parent->entries.end(),
                           [&](const RemoteDirEntry &e) { return e.name == dir.filename(); });
    ASSERT_NE(it, parent->entries.end());
    EXPECT_EQ(it->kind, RemoteDirEntry::Kind::Directory);
    EXPECT_TRUE(it->checkpoint); // a DCP .metadata inside

    auto listing = session->listDirectory(dir.string());
    ASSERT_TRUE(listing) << listing.error().toString();
    EXPECT_TRUE(listing->checkpoint);
    std::map<std::string, uintmax_t> files;
    for (const auto &e : fs::directory_iterator(dir))
        if (e.is_regular_file())
            files[e.path().filename().string()] = e.file_size();
    std::map<std::string, uintmax_t> listed;
    for (const RemoteDirEntry &e : listing->entries)
        if (e.kind == RemoteDirEntry::Kind::File)
            listed[e.name] = e.size;
    EXPECT_EQ(listed, files);

    auto missing = session->listDirectory(dir.string() + "/no-such-directory");
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().message.find("No such file"), std::string::npos)
        << missing.error().toString();
    auto file = session->listDirectory((dir / "config.json").string());
    ASSERT_FALSE(file);
    EXPECT_NE(file.error().toString().find("not a directory"), std::string::npos)
        << file.error().toString();
}

TEST(RemotePrompt, TheHookAnswersSsh)
{
    if (env("SHARDSCOPE_TEST_DEMO").empty())
        GTEST_SKIP() << "run by tools/check_remote.py";
    const bool loopback = env("SHARDSCOPE_TEST_HOST").empty();
    if (!loopback && env("SHARDSCOPE_TEST_PASSPHRASE").empty())
        GTEST_SKIP() << "this key asks for nothing";
    if (loopback) { // the stand-in asks as ssh would
        ::setenv("LOOPBACK_ASKPASS_PROMPT", "Enter passphrase for key 'test': ", 1);
        ::setenv("LOOPBACK_ASKPASS_ANSWER", "correct horse", 1);
        ::setenv("SHARDSCOPE_TEST_PASSPHRASE", "correct horse", 1);
    }
    Prompts prompts;
    auto s = connectTo(&prompts);
    ASSERT_TRUE(s) << s.error().toString();
    ASSERT_FALSE(prompts.seen.empty());
    EXPECT_NE(prompts.seen.front().find("passphrase"), std::string::npos) << prompts.seen.front();
    // A wrong answer: ssh refuses, and the session says what ssh said, in one line.
    const std::string right = env("SHARDSCOPE_TEST_PASSPHRASE");
    ::setenv("SHARDSCOPE_TEST_PASSPHRASE", "battery staple", 1);
    auto refused = connectTo();
    ::setenv("SHARDSCOPE_TEST_PASSPHRASE", right.c_str(), 1);
    if (loopback) {
        ::unsetenv("LOOPBACK_ASKPASS_PROMPT");
        ::unsetenv("LOOPBACK_ASKPASS_ANSWER");
        ::unsetenv("SHARDSCOPE_TEST_PASSPHRASE");
    }
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("Permission denied"), std::string::npos)
        << refused.error().message;
}

TEST(RemoteTarget, DestinationsAsSshTakesThem)
{
    auto a = RemoteTarget::parse("alice@login.cluster:2222");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->host, "alice@login.cluster");
    EXPECT_EQ(a->port, 2222);
    EXPECT_EQ(a->name(), "alice@login.cluster:2222");
    auto b = RemoteTarget::parse("perlmutter");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->host, "perlmutter");
    EXPECT_EQ(b->port, 0);
    auto c = RemoteTarget::parse("[::1]:22");
    ASSERT_TRUE(c);
    EXPECT_EQ(c->host, "::1");
    EXPECT_EQ(c->port, 22);
    auto d = RemoteTarget::parse("fe80::1");
    ASSERT_TRUE(d);
    EXPECT_EQ(d->host, "fe80::1");
    for (const char *bad :
         {"", "-oProxyCommand=touch x", "host:", "host:99999", "host:2x", "a b", "user@"})
        EXPECT_FALSE(RemoteTarget::parse(bad)) << bad;
}

int main(int argc, char **argv)
{
    // The session's prompt hook starts this binary as ssh's SSH_ASKPASS.
    if (auto code = runAskpassHelper(argc, argv))
        return *code;
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
