// SPDX-License-Identifier: MIT
// The front door (shardscope/session.h) on the bundled demo: a diff and a verification driven as
// the CLI and the GUI drive them, with progress that moves through the stages and ends at its
// total, and a cancel midway that stops the job. The results equal the pipeline's own calls.
#include "testenv.h"

#include <shardscope/report.h>
#include <shardscope/session.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <unistd.h>

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

fs::path demoDir()
{
    return fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
}

// The demo's layout, written where a request can name it.
std::string demoLayout()
{
    static const std::string path = [] {
        auto layout = layoutFromConfig((demoDir() / "config.json").string(), {});
        EXPECT_TRUE(layout) << layout.error().toString();
        const fs::path out = fs::temp_directory_path() /
                             ("ss-session-layout-" + std::to_string(::getpid()) + ".json");
        std::ofstream(out) << layoutToJson(*layout);
        return out.string();
    }();
    return path;
}

// The demo over two DP ranks, on one thread and the CPU: the same run every time.
VerifyRequest demoVerifyRequest()
{
    VerifyRequest request;
    request.checkpoint = demoDir().string();
    request.layout = demoLayout();
    request.dp = 2;
    request.threads = 1;
    request.useGpu = false;
    return request;
}

struct Recorder
{
    std::mutex mutex;
    std::vector<std::string> stages; ///< each stage once, in order of first report
    std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> reports;

    bool record(const JobProgress &p)
    {
        std::lock_guard lock(mutex);
        const std::string stage(p.stage);
        if (stages.empty() || stages.back() != stage)
            stages.push_back(stage);
        reports[stage].emplace_back(p.done, p.total);
        return true;
    }
    // Done never goes back within a stage, and the stage ends at its total.
    void expectEndsAtTotal(const std::string &stage)
    {
        const auto &r = reports[stage];
        ASSERT_FALSE(r.empty()) << stage;
        for (size_t i = 1; i < r.size(); ++i)
            EXPECT_GE(r[i].first, r[i - 1].first) << stage << " report " << i;
        EXPECT_GT(r.back().second, 0u) << stage;
        EXPECT_EQ(r.back().first, r.back().second) << stage;
    }
};

} // namespace

TEST(FrontDoor, DiffGoesThroughItsStagesAndEqualsThePipeline)
{
    Recorder rec;
    JobControl control;
    control.progress = [&](const JobProgress &p) { return rec.record(p); };
    DiffRequest request{demoDir().string(), demoLayout(), {}, nullptr};
    auto diff = runDiff(request, control);
    ASSERT_TRUE(diff) << diff.error().toString();
    EXPECT_EQ(rec.stages, (std::vector<std::string>{"open", "layout", "diff"}));
    rec.expectEndsAtTotal("diff");
    EXPECT_GT(rec.reports["diff"].size(), 2u) << "no report between the start and the end";
    EXPECT_EQ(diff->against, demoLayout()) << "the layout as the user named it";

    // The pipeline's own calls give the same every field.
    auto index = openCheckpoint(demoDir().string());
    auto layout = readLayout(demoLayout());
    ASSERT_TRUE(index && layout);
    auto direct = diffAgainstLayout(*index, *layout, {});
    ASSERT_TRUE(direct);
    direct->against = demoLayout();
    EXPECT_EQ(diffToJson(*diff), diffToJson(*direct));
}

TEST(FrontDoor, DiffCancelledMidwayStops)
{
    for (bool byToken : {false, true}) {
        JobControl control;
        int diffReports = 0;
        control.progress = [&](const JobProgress &p) {
            if (p.stage != "diff" || p.done == 0)
                return true;
            ++diffReports;
            if (byToken) {
                control.cancel.cancel();
                return true;
            }
            return false;
        };
        auto diff = runDiff({demoDir().string(), demoLayout(), {}, nullptr}, control);
        ASSERT_FALSE(diff) << "byToken " << byToken;
        EXPECT_EQ(diff.error().code, Error::Code::Cancelled);
        EXPECT_EQ(diffReports, 1) << "nothing reported after the stop";
    }
}

namespace {

// Two indexes of `n` keys each, the second's spelt without the first's wrapper prefixes (as the
// rename rule's regexes spell them: the rule's meaning, not its implementation).
std::pair<OpenedIndex, OpenedIndex> wrappedAndUnwrapped(size_t n)
{
    static const std::regex model(R"(^model\d*\.(module\.)*)");
    static const std::regex optim(R"(^optimizer\.state\.(module\.)+)");
    const std::vector<std::string> tricky = {"model.module.decoder.w",
                                             "model0.module.module.decoder.x",
                                             "model12.decoder.y",
                                             "modelx.decoder.z",
                                             "model.optimizer.state.module.v",
                                             "optimizer.state.module.u",
                                             "optimizer.state.t",
                                             "model",
                                             "model7",
                                             "decoder.module.s"};
    CheckpointIndex a, b;
    for (size_t i = 0; i < n; ++i) {
        const std::string key = tricky[i % tricky.size()] + "." + std::to_string(i);
        std::string plain = std::regex_replace(key, model, "");
        plain = std::regex_replace(plain, optim, "optimizer.state.");
        TensorEntry t;
        t.dtype = DType::Float32;
        t.dtypeName = "torch.float32";
        t.shape = {4};
        t.key = key;
        a.tensors.push_back(t);
        t.key = plain;
        b.tensors.push_back(std::move(t));
    }
    return {std::make_shared<const CheckpointIndex>(std::move(a)),
            std::make_shared<const CheckpointIndex>(std::move(b))};
}

} // namespace

// A structural compare at scale reports its progress and stops when cancelled (issue 39: a
// DeepSeek-V3-scale compare cancelled at 3 s ended at 11.6 s), and names every wrapped key
// renamed, none added or removed.
TEST(FrontDoor, CheckpointDiffReportsProgressAndStopsWhenCancelled)
{
    auto [a, b] = wrappedAndUnwrapped(50'000);
    CheckpointDiffRequest request{"a", "b", {}, a, b};
    Recorder rec;
    JobControl control;
    control.progress = [&](const JobProgress &p) { return rec.record(p); };
    auto whole = runCheckpointDiff(request, control);
    ASSERT_TRUE(whole) << whole.error().toString();
    rec.expectEndsAtTotal("diff");
    EXPECT_GT(rec.reports["diff"].size(), 10u) << "too few reports to cancel in time";
    size_t renamed = 0;
    for (const KeyChange &c : whole->changes) {
        EXPECT_EQ(c.kind, KeyChange::Kind::Renamed) << c.key;
        renamed += c.kind == KeyChange::Kind::Renamed && c.rule == "wrapper_prefix";
    }
    EXPECT_EQ(renamed + whole->same, a->tensors.size());

    for (bool byToken : {false, true}) {
        JobControl cancelling;
        int afterStop = 0;
        bool stop = false;
        cancelling.progress = [&](const JobProgress &p) {
            if (stop) {
                ++afterStop;
                return false;
            }
            if (p.stage != "diff" || p.done == 0)
                return true;
            stop = true;
            if (byToken) {
                cancelling.cancel.cancel();
                return true;
            }
            return false;
        };
        auto diff = runCheckpointDiff(request, cancelling);
        ASSERT_FALSE(diff) << "byToken " << byToken;
        EXPECT_EQ(diff.error().code, Error::Code::Cancelled);
        EXPECT_EQ(afterStop, 0) << "nothing reported after the stop";
    }
}

TEST(FrontDoor, VerifyGoesThroughItsStagesAndDecidesItsDefaults)
{
    Recorder rec;
    JobControl control;
    control.progress = [&](const JobProgress &p) { return rec.record(p); };
    VerifyRequest request = demoVerifyRequest();
    auto report = runVerify(request, control);
    ASSERT_TRUE(report) << report.error().toString();
    EXPECT_EQ(rec.stages, (std::vector<std::string>{"open", "diff", "plan", "verify"}));
    rec.expectEndsAtTotal("verify");
    EXPECT_TRUE(report->result.clean());
    EXPECT_FALSE(report->result.cancelled);
    EXPECT_EQ(report->parallel.dpShard, 2);
    EXPECT_EQ(report->result.world, 2);
    // The memory budget's default is decided here, once: a quarter of physical memory.
    const uint64_t ram = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
    EXPECT_EQ(report->maxMemory, ram / 4);
    EXPECT_EQ(report->healthDevice(), "cpu");
    // The JSON schema comes from the backend too.
    EXPECT_NE(verifyToJson(*report).find("\"schema\": \"shardscope.verify/1\""), std::string::npos);
}

TEST(FrontDoor, VerifyCancelledMidwayStopsWithAPartialResult)
{
    VerifyRequest request = demoVerifyRequest();
    request.maxMemory = 60'000; // the biggest parameters stream: many reports
    auto whole = runVerify(request);
    ASSERT_TRUE(whole);
    const size_t all = whole->result.params.size();

    JobControl control;
    uint64_t stoppedAt = 0;
    control.progress = [&](const JobProgress &p) {
        if (p.stage != "verify" || stoppedAt)
            return true;
        if (p.total && p.done * 2 >= p.total) {
            stoppedAt = p.done;
            control.cancel.cancel();
        }
        return true;
    };
    auto report = runVerify(request, control);
    ASSERT_TRUE(report) << report.error().toString();
    EXPECT_TRUE(report->result.cancelled);
    EXPECT_GT(stoppedAt, 0u);
    EXPECT_LT(report->result.params.size(), all) << "it went on to the end";
    EXPECT_LT(report->result.bytesRead, whole->result.bytesRead);
}

TEST(FrontDoor, ProblemsFoldByCauseAndFile)
{
    std::vector<Problem> problems;
    for (int i = 0; i < 5; ++i)
        problems.push_back(
            {"k" + std::to_string(i), "/c/__1_0.distcp", uint64_t(100 * i),
             "item [" + std::to_string(100 * i) + ", +100) runs past the end of the 250-byte file",
             Problem::Effect::Unreadable});
    problems.push_back(
        {"other", "/c/__0_0.distcp", {}, "data file is missing", Problem::Effect::Unreadable});
    problems.push_back(
        {"k9", "/c/__1_0.distcp", {}, "a chunk lies outside the tensor", Problem::Effect::Holes});
    const auto groups = groupProblems(problems);
    ASSERT_EQ(groups.size(), 3u);
    EXPECT_EQ(groups[0].members, (std::vector<size_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(groups[0].cause, "item […, +100) runs past the end of the 250-byte file");
    EXPECT_EQ(groups[0].headline(problems),
              "/c/__1_0.distcp: 5 keys unreadable: item […, +100) runs past the end of the "
              "250-byte file (first: key 'k0' at offset 0)");
    // A group of one reads as the problem itself.
    EXPECT_EQ(groups[1].headline(problems), problems[5].toString());
    EXPECT_EQ(groups[2].members, (std::vector<size_t>{6}));
}
