// SPDX-License-Identifier: MIT
#include "verifycommand.h"
#include "inspectcommand.h"

#include <shardscope/distributed.h>
#include <shardscope/verify.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <unistd.h>

namespace shardscope::cli {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void onInterrupt(int)
{
    g_interrupted = true;
}

int fail(const Error &e)
{
    std::cerr << "shardscope-cli: " << e.toString() << "\n";
    return ExitUnreadable;
}

// A throttled progress bar with an ETA on stderr.
class ProgressBar
{
public:
    explicit ProgressBar(bool enabled)
        : m_enabled(enabled)
        , m_start(std::chrono::steady_clock::now())
    {}
    ~ProgressBar()
    {
        if (m_drawn)
            std::fputs("\n", stderr);
    }
    bool update(uint64_t done, uint64_t total)
    {
        if (g_interrupted)
            return false;
        if (!m_enabled || total == 0)
            return true;
        const auto now = std::chrono::steady_clock::now();
        if (now - m_last < std::chrono::milliseconds(200) && done < total)
            return true;
        m_last = now;
        const double f = double(done) / double(total);
        const double elapsed = std::chrono::duration<double>(now - m_start).count();
        const double eta = f > 0 ? elapsed * (1 - f) / f : 0;
        const int width = 30, fill = int(f * width);
        std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %.0f MiB  ETA %.0fs ", fill,
                     "##############################", width - fill, "", f * 100,
                     double(done) / (1 << 20), eta);
        m_drawn = true;
        return true;
    }

private:
    bool m_enabled;
    bool m_drawn = false;
    std::chrono::steady_clock::time_point m_start, m_last;
};

} // namespace

int runVerify(const VerifyCommandOptions &o)
{
    // Launched as one of several processes (torchrun, srun): join the job first, so that a rank
    // that cannot does not leave the others waiting at their first collective.
    auto launch = launchFromEnvironment();
    if (!launch)
        return fail(launch.error());
    std::unique_ptr<Communicator> comm;
    if (*launch && (*launch)->worldSize > 1) {
        const CommBackend backend = o.backend == "gloo"   ? CommBackend::Gloo
                                    : o.backend == "nccl" ? CommBackend::Nccl
                                                          : CommBackend::Auto;
        auto joined = connect(**launch, backend);
        if (!joined)
            return fail(joined.error());
        comm = std::move(*joined);
    }
    const bool leader = !comm || comm->rank() == 0; // prints; the others stay quiet

    auto checkpoint = openCheckpoint(o.checkpoint);
    if (!checkpoint)
        return fail(checkpoint.error());
    auto layout = readLayout(o.layout);
    if (!layout)
        return fail(layout.error());
    ParallelConfig &par = layout->parallel;
    for (auto [flag, value] :
         {std::pair{o.tp, &par.tp}, {o.pp, &par.pp}, {o.ep, &par.ep}, {o.etp, &par.etp}})
        if (flag > 0)
            *value = flag;
    if (o.firstStageLayers >= 0)
        par.firstStageLayers = o.firstStageLayers;
    if (o.lastStageLayers >= 0)
        par.lastStageLayers = o.lastStageLayers;
    if (o.world > 0) {
        par.dpShard = o.world;
    } else if (comm) { // one rank per process
        const int modelRanks = std::max(1, par.tp) * std::max(1, par.pp);
        if (comm->size() % modelRanks)
            return fail(makeError(
                Error::Code::Unsupported,
                std::to_string(comm->size()) +
                    " processes do not divide into tp × pp = " + std::to_string(modelRanks)));
        par.dpShard = comm->size() / modelRanks;
    }
    DiffOptions diffOptions;
    diffOptions.disabledRules = o.disabledRules;
    auto diff = diffAgainstLayout(*checkpoint, *layout, diffOptions);
    if (!diff)
        return fail(diff.error());
    auto plan = planLoad(*layout, *diff);
    if (!plan)
        return fail(plan.error());

    std::signal(SIGINT, onInterrupt);
    VerifyResult result;
    {
        ProgressBar bar(leader && !o.quiet && !o.json && isatty(STDERR_FILENO));
        VerifyOptions options;
        // Default: a quarter of physical memory.
        options.maxMemory =
            o.maxMemory ? o.maxMemory
                        : uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE)) / 4;
        options.hash = o.hash;
        options.threads = o.threads;
        options.comm = comm.get();
        options.progress = [&bar](uint64_t done, uint64_t total) {
            return bar.update(done, total);
        };
        auto r = verifyLoad(*checkpoint, *layout, *diff, *plan, options);
        if (!r)
            return fail(r.error());
        result = std::move(*r);
    }
    std::signal(SIGINT, SIG_DFL);
    const int code = result.cancelled ? ExitUnreadable
                     : result.clean() ? ExitHealthy
                                      : ExitProblems;
    // Every rank has the whole result and rank 0 reports it; the others wait until it has
    // (a launcher stops the whole job when one rank exits with a non-zero code).
    struct Done
    {
        Communicator *comm;
        ~Done()
        {
            // Out before the barrier: once the others leave with a non-zero code, the launcher
            // stops this process too, and a report still in stdout's buffer would be cut short.
            std::cout.flush();
            if (comm)
                (void)comm->barrier();
        }
    } done{comm.get()};
    if (!leader)
        return code;
    // Where the health kernels ran: the GPU's name when any parameter's ran there.
    std::string healthDevice = "cpu";
    for (const ParamCheck &c : result.params)
        if (c.health.device.starts_with("cuda"))
            healthDevice = c.health.device;
    if (o.json) {
        nlohmann::ordered_json j;
        j["schema"] = "shardscope.verify/1";
        j["checkpoint"] = o.checkpoint;
        j["layout"] = o.layout;
        j["world"] = result.world;
        j["parallel"] = {{"tp", plan->parallel.tp},   {"dp", plan->parallel.dpShard},
                         {"pp", plan->parallel.pp},   {"ep", plan->parallel.ep},
                         {"etp", plan->parallel.etp}, {"expert_dp", plan->expertDp}};
        j["processes"] = result.processes;
        j["threads"] = result.threads;
        j["backend"] = result.backend.empty() ? "none" : result.backend;
        j["device"] = healthDevice;
        j["checked"] = result.checked;
        j["bit_identical"] = result.identical;
        j["mismatched"] = result.mismatched;
        j["round_trip_failures"] = result.roundTripFailures;
        j["kept_initial"] = result.keptInitial;
        j["unreadable"] = result.unreadable;
        j["bytes_read"] = result.bytesRead;
        j["seconds"] = result.seconds;
        j["cancelled"] = result.cancelled;
        j["clean"] = result.clean();
        auto params = nlohmann::ordered_json::array();
        for (const ParamCheck &c : result.params)
            params.push_back({{"name", c.name},
                              {"dtype", c.dtype},
                              {"shape", c.shape},
                              {"outcome", outcomeName(c.outcome)},
                              {"mismatches", c.mismatches},
                              {"first_mismatch", c.firstMismatch},
                              {"round_trip", c.roundTrip},
                              {"ranks", c.ranksHolding},
                              {"fingerprint", c.fingerprint},
                              {"sha256", c.sha256},
                              {"device", c.health.device},
                              {"stats",
                               {{"min", c.health.min},
                                {"max", c.health.max},
                                {"mean", c.health.mean},
                                {"std", c.health.std},
                                {"l2", c.health.l2},
                                {"nan", c.health.nanCount},
                                {"inf", c.health.posInfCount + c.health.negInfCount},
                                {"denormal", c.health.denormalCount},
                                {"histogram", c.health.histogram}}},
                              {"note", c.note}});
        j["params"] = std::move(params);
        std::cout << j.dump(1) << "\n";
    } else {
        const size_t loadable = result.checked - result.keptInitial;
        const ParallelConfig &pc = plan->parallel;
        std::cout << "world " << result.world << " (tp " << pc.tp << " × dp " << pc.dpShard
                  << " × pp " << pc.pp << "; experts ep " << pc.ep << " × etp " << pc.etp
                  << " × dp " << plan->expertDp << "; health on " << healthDevice
                  << (result.processes > 1 ? ", " + std::to_string(result.processes) +
                                                 " processes over " + result.backend
                                           : ", one process, " + std::to_string(result.threads) +
                                                 (result.threads > 1 ? " threads" : " thread"))
                  << ")\n"
                  << result.identical << " of " << loadable
                  << " loadable parameters bit-identical after gathering every rank's shard, "
                  << result.mismatched << " mismatches across ranks\n"
                  << (result.checked - result.roundTripFailures) << " of " << result.checked
                  << " re-split into the stored tensors bit for bit\n";
        for (const ParamCheck &c : result.params)
            if (c.outcome == ParamCheck::Outcome::Mismatch || !c.roundTrip)
                std::cout << "! " << c.name << ": " << c.mismatches << " mismatches, first at "
                          << c.firstMismatch << (c.note.empty() ? "" : "; " + c.note) << "\n";
        if (result.keptInitial) {
            std::cout << "\nKEPT AT THEIR INITIAL VALUES (" << result.keptInitial << "):\n";
            for (const ParamCheck &c : result.params)
                if (c.outcome == ParamCheck::Outcome::KeptInitial)
                    std::cout << "  " << c.name << "\n";
        }
        if (result.unreadable) {
            std::cout << "\nUNREADABLE: THE LOAD RAISES READING THEM (" << result.unreadable
                      << "):\n";
            for (const ParamCheck &c : result.params)
                if (c.outcome == ParamCheck::Outcome::Unreadable)
                    std::cout << "  " << c.name << ": " << c.note << "\n";
        }
        std::cout << double(result.bytesRead) / (1 << 20) << " MiB read in " << result.seconds
                  << " s" << (result.cancelled ? " (stopped)" : "") << "\n";
    }
    return code;
}

} // namespace shardscope::cli
