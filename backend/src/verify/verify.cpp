// SPDX-License-Identifier: MIT
// CPU load verification: the planned reads, per rank, into local shards; gathered and compared
// bit for bit with direct reads of the stored components.
#include "shardscope/verify.h"
#include "common/rankresults.h"
#include "verify/paramchecker.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

namespace shardscope {

using detail::CheckedParam;
using detail::ParamChecker;
using detail::VerifyRun;

std::string_view outcomeName(ParamCheck::Outcome o)
{
    switch (o) {
    case ParamCheck::Outcome::Identical:
        return "bit_identical";
    case ParamCheck::Outcome::Mismatch:
        return "mismatch";
    case ParamCheck::Outcome::KeptInitial:
        return "kept_initial_values";
    case ParamCheck::Outcome::Skipped:
        return "skipped";
    case ParamCheck::Outcome::Unreadable:
        return "unreadable";
    case ParamCheck::Outcome::WrongSource:
        return "wrong_source";
    case ParamCheck::Outcome::NotChecked:
        return "not_checked";
    }
    return "?";
}

namespace {

std::string hex64(uint64_t v)
{
    static const char *d = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4)
        s[size_t(i)] = d[v & 15];
    return s;
}

// Parameter checks travel between ranks as JSON; doubles as their bits, so they arrive exact.
nlohmann::json toJson(const ParamCheck &c, uint32_t param)
{
    const TensorHealth &h = c.health;
    auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
    return {{"param", param},
            {"name", c.name},
            {"dtype", c.dtype},
            {"shape", c.shape},
            {"outcome", int(c.outcome)},
            {"mismatches", c.mismatches},
            {"first", c.firstMismatch},
            {"round_trip", c.roundTrip},
            {"ranks", c.ranksHolding},
            {"sourced", c.sourced},
            {"fingerprint", c.fingerprint},
            {"sha256", c.sha256},
            {"note", c.note},
            {"h",
             {h.count, h.finite, h.nanCount, h.posInfCount, h.negInfCount, h.denormalCount,
              bits(h.min), bits(h.max), bits(h.mean), bits(h.std), bits(h.l2), h.fingerprint}},
            {"hist", h.histogram},
            {"device", h.device}};
}

ParamCheck fromJson(const nlohmann::json &j)
{
    ParamCheck c;
    auto real = [](const nlohmann::json &v) { return std::bit_cast<double>(v.get<uint64_t>()); };
    c.name = j.at("name");
    c.dtype = j.at("dtype");
    c.shape = j.at("shape").get<std::vector<int64_t>>();
    c.outcome = ParamCheck::Outcome(j.at("outcome").get<int>());
    c.mismatches = j.at("mismatches");
    c.firstMismatch = j.at("first");
    c.roundTrip = j.at("round_trip");
    c.ranksHolding = j.at("ranks");
    c.sourced = j.at("sourced");
    c.fingerprint = j.at("fingerprint");
    c.sha256 = j.at("sha256");
    c.note = j.at("note");
    const auto &h = j.at("h");
    TensorHealth &t = c.health;
    t.count = h.at(0);
    t.finite = h.at(1);
    t.nanCount = h.at(2);
    t.posInfCount = h.at(3);
    t.negInfCount = h.at(4);
    t.denormalCount = h.at(5);
    t.min = real(h.at(6));
    t.max = real(h.at(7));
    t.mean = real(h.at(8));
    t.std = real(h.at(9));
    t.l2 = real(h.at(10));
    t.fingerprint = h.at(11);
    t.histogram = j.at("hist").get<std::vector<int64_t>>();
    t.device = j.at("device");
    return c;
}

void tally(VerifyResult &r, const ParamCheck &c)
{
    switch (c.outcome) {
    case ParamCheck::Outcome::Identical:
        ++r.identical;
        break;
    case ParamCheck::Outcome::Mismatch:
        ++r.mismatched;
        break;
    case ParamCheck::Outcome::KeptInitial:
        ++r.keptInitial;
        break;
    case ParamCheck::Outcome::Skipped:
        return;
    case ParamCheck::Outcome::Unreadable:
        ++r.unreadable;
        return;
    case ParamCheck::Outcome::WrongSource:
        ++r.wrongSource;
        break;
    case ParamCheck::Outcome::NotChecked:
        ++r.notChecked;
        return;
    }
    // A parameter with no source that something wrote into counts as kept-at-init gone wrong.
    if (c.outcome == ParamCheck::Outcome::Mismatch && !c.sourced)
        --r.mismatched, ++r.keptInitial;
    ++r.checked;
    r.roundTripFailures += !c.roundTrip;
}

using Checks = std::vector<std::pair<uint32_t, ParamCheck>>;

// Threads that check parameters side by side, each with an equal part of the budget: no more
// than would make the largest parameter stream (so the results never depend on the count).
int checkerThreads(VerifyRun &run)
{
    if (run.comm)
        return 1;
    int threads = run.options.threads > 0 ? run.options.threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
    uint64_t largest = 0;
    int params = 0;
    run.overlap = false; // side by side, each thread computes its own health
    for (uint32_t pi = 0; pi < run.perParam.size(); ++pi)
        if (!run.perParam[pi].empty()) {
            ++params;
            largest = std::max(largest, run.wholeNeed(pi));
        }
    threads = std::clamp(threads, 1, std::max(params, 1));
    if (run.options.maxMemory)
        while (threads > 1 && largest > run.options.maxMemory / uint64_t(threads))
            --threads;
    return threads;
}

// One thread, parameter after parameter, each one's health beside the next one's read. Across
// processes every rank walks the same parameters, each checked by one rank in turn.
Status checkInTurn(VerifyRun &run, Checks &checks, bool &cancelled, std::optional<Error> &failed)
{
    ParamChecker checker(run);
    std::future<std::pair<Result<TensorHealth>, std::vector<std::byte>>> pending;
    size_t pendingAt = 0;
    auto finishHealth = [&] {
        if (!pending.valid())
            return;
        auto [health, bytes] = pending.get();
        checker.giveBack(std::move(bytes));
        if (health)
            checks[pendingAt].second.health = std::move(*health);
    };
    uint32_t ordinal = 0; // parameters handled so far: which rank checks the next one
    for (uint32_t pi = 0; pi < run.perParam.size() && !checker.stopped(); ++pi) {
        if (run.perParam[pi].empty())
            continue; // buffers and empty parameters: not in FSDP's buffers
        const int owner = run.comm ? int(ordinal++ % uint32_t(run.procs)) : run.me;
        auto r = checker.check(pi, owner);
        if (!r)
            return r.error();
        if (*r) {
            CheckedParam &c = **r;
            checks.emplace_back(pi, std::move(c.check));
            if (c.healthInput) {
                finishHealth();
                pendingAt = checks.size() - 1;
                pending = std::async(std::launch::async,
                                     [t = std::move(*c.healthInput), gpu = run.gpu]() mutable {
                                         auto health = detail::healthOf(t, gpu, 0);
                                         return std::pair(std::move(health), std::move(t.bytes));
                                     });
            }
        }
    }
    finishHealth();
    failed = checker.failed();
    cancelled = cancelled || checker.cancelled();
    return Ok{};
}

// Several threads in one process, each taking the next parameter in order. An error stops the
// others taking more; the first parameter's error is the one reported (every parameter before
// it was taken earlier and runs to its end), so the outcome does not depend on timing.
Status checkSideBySide(VerifyRun &run, int threads, Checks &checks, bool &cancelled)
{
    const size_t n = run.perParam.size();
    std::vector<std::optional<ParamCheck>> done(n);
    std::vector<std::optional<Error>> errors(n);
    std::atomic<uint32_t> next{0};
    std::atomic<bool> halt{false};
    auto work = [&] {
        ParamChecker checker(run);
        while (!halt && !run.cancelled) {
            const uint32_t pi = next++;
            if (pi >= n)
                return;
            if (run.perParam[pi].empty())
                continue;
            auto r = checker.check(pi, -1);
            if (!r) {
                errors[pi] = r.error();
                halt = true;
                return;
            }
            if (!*r)
                return; // cancelled within it
            CheckedParam &c = **r;
            if (c.healthInput) {
                if (auto health = detail::healthOf(*c.healthInput, run.gpu, run.healthThreads))
                    c.check.health = std::move(*health);
                checker.giveBack(std::move(c.healthInput->bytes));
            }
            done[pi] = std::move(c.check);
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
        pool.emplace_back(work);
    work();
    for (std::thread &t : pool)
        t.join();
    cancelled = run.cancelled;
    for (const auto &e : errors)
        if (e)
            return *e;
    for (uint32_t pi = 0; pi < n; ++pi)
        if (done[pi])
            checks.emplace_back(pi, std::move(*done[pi]));
    return Ok{};
}

} // namespace

Result<VerifyResult> verifyLoad(const CheckpointIndex &checkpoint, const Layout &layout,
                                const DiffResult &diff, const LoadPlan &plan,
                                const VerifyOptions &options)
{
    const auto t0 = std::chrono::steady_clock::now();
    VerifyResult result;
    result.world = plan.world;
    VerifyRun run(checkpoint, layout, diff, plan, options);
    if (run.comm) {
        if (plan.world != run.procs)
            return makeError(Error::Code::Format, "the plan has " + std::to_string(plan.world) +
                                                      " ranks (tp × dp × pp) but the job has " +
                                                      std::to_string(run.procs) + " processes");
        result.processes = run.procs;
        result.backend = run.comm->backend();
    }

    const int threads = checkerThreads(run);
    result.threads = threads;
    run.overlap = threads == 1;
    run.budget = options.maxMemory / uint64_t(threads);
    run.healthThreads =
        threads > 1 ? std::max(1, int(std::thread::hardware_concurrency()) / threads) : 0;
    Checks checks;
    std::optional<Error> failed; // across processes: this rank's, sent to the others
    Status st = threads > 1 ? checkSideBySide(run, threads, checks, result.cancelled)
                            : checkInTurn(run, checks, result.cancelled, failed);
    if (!st)
        return st.error();
    result.bytesRead = run.bytesRead;
    for (auto &[pi, c] : checks)
        c.fingerprint = c.health.device.empty() ? "" : hex64(c.health.fingerprint);

    // Across processes every rank sends what it checked (or why it stopped); all merge the same.
    if (run.comm) {
        nlohmann::json mine = {{"bytes", result.bytesRead},
                               {"error", failed ? failed->toString() : std::string()},
                               {"checks", nlohmann::json::array()}};
        for (const auto &[pi, c] : checks)
            mine["checks"].push_back(toJson(c, pi));
        auto all = detail::gatherRankResults(*run.comm, mine);
        if (!all)
            return all.error();
        checks.clear();
        result.bytesRead = 0;
        for (const nlohmann::json &j : *all) {
            result.bytesRead += j.value("bytes", uint64_t(0));
            for (const auto &c : j.at("checks"))
                checks.emplace_back(c.at("param").get<uint32_t>(), fromJson(c));
        }
        std::sort(checks.begin(), checks.end(),
                  [](const auto &a, const auto &b) { return a.first < b.first; });
    }
    // What the plan leaves out is named, with why, instead of silently missing from the count:
    // buffers (a router's expert_bias) are not in Megatron-FSDP's sharded buffers (each rank
    // loads them whole: nothing to gather or split), and empty parameters hold nothing.
    if (!result.cancelled)
        for (uint32_t pi = 0; pi < run.perParam.size(); ++pi) {
            const LayoutParam &lp = layout.params[pi];
            if (!run.perParam[pi].empty() || lp.name.ends_with("._extra_state"))
                continue;
            ParamCheck c;
            c.name = lp.name;
            c.shape = lp.shape;
            c.dtype = lp.dtype;
            c.outcome = ParamCheck::Outcome::NotChecked;
            const DiffEntry *e = run.entry(pi);
            c.sourced = e && e->realLoadFills;
            c.note = std::string(lp.hasOptimizerState
                                     ? "not checked: empty, nothing to load"
                                     : "not checked: a buffer, loaded whole by every rank, not "
                                       "sharded (nothing to gather)") +
                     (e ? "; the diff says " + std::string(statusName(e->status)) +
                              (e->sources.empty() ? "" : " from " + e->sources.front().key) +
                              (e->reason.empty() ? "" : ": " + e->reason)
                        : std::string());
            checks.emplace_back(pi, std::move(c));
        }
    std::stable_sort(checks.begin(), checks.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
    // Loaded values that look like a fresh init: "the experts are still random" shows here too.
    int layers = 0;
    for (const LayoutParam &p : layout.params)
        layers = std::max(layers, decoderLayerOf(p.name) + 1);
    for (auto &[pi, c] : checks) {
        const bool loaded = c.outcome == ParamCheck::Outcome::Identical ||
                            c.outcome == ParamCheck::Outcome::WrongSource;
        if (loaded && !c.health.device.empty() && c.health.count > 0 &&
            isFloatingPoint(dtypeFromName(c.dtype).value_or(DType::Unknown)))
            if (const std::string why = initialLikeness(c.health, options.initStd, layers);
                !why.empty())
                c.note += (c.note.empty() ? "" : "; ") + ("looks freshly initialised: " + why);
        tally(result, c);
        result.params.push_back(std::move(c));
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

} // namespace shardscope
