// SPDX-License-Identifier: MIT
// verify: the parallel configuration and its defaults, diff, plan and the real load.
#include "shardscope/session.h"

#include "session/opened.h"

#include <algorithm>
#include <unistd.h>

namespace shardscope {

std::string VerifyReport::healthDevice() const
{
    for (const ParamCheck &c : result.params)
        if (c.health.device.starts_with("cuda"))
            return c.health.device;
    return "cpu";
}

std::vector<std::string> verifyProves()
{
    return {"every rank's planned reads assemble its shard, and the shards gathered are bit for "
            "bit the stored tensors the diff names (through the split rules)",
            "re-splitting each rank's shard the way the save path does gives the stored bytes "
            "back (the round trip)",
            "parameters without a source keep their initial values; unreadable data is named"};
}

std::vector<std::string> verifyDoesNotProve()
{
    return {"that the stored values are the right ones: rows or chunks misplaced when the "
            "checkpoint was saved (Megatron-LM#2769) load and round-trip bit for bit; compare "
            "against a reference checkpoint's values to see them",
            "that the model's layout is the one that saved it: the diff checks names, shapes "
            "and dtypes, not the training run"};
}

Result<std::unique_ptr<Communicator>> joinJob(CommBackend backend)
{
    auto launch = launchFromEnvironment();
    if (!launch)
        return launch.error();
    if (!*launch || (*launch)->worldSize <= 1)
        return std::unique_ptr<Communicator>();
    return connect(**launch, backend);
}

Result<VerifyReport> runVerify(const VerifyRequest &request, const JobControl &control)
{
    VerifyReport report;
    report.checkpoint = request.checkpoint;
    report.layout = request.layout;
    if (!control.report({"open", 0, 0}))
        return makeError(Error::Code::Cancelled, "cancelled");
    // The load reads every item: each one's structure checked, at any scale.
    auto opened = detail::openOrReuse(request.opened, request.checkpoint, true);
    if (!opened)
        return opened.error();
    const OpenedIndex checkpoint = std::move(*opened);
    auto read = detail::layoutOrRead(request.openedLayout, request.layout);
    if (!read)
        return read.error();
    std::optional<Layout> layout(**read); // its parallel sizes are set below

    ParallelConfig &par = layout->parallel;
    for (auto [flag, value] : {std::pair{request.tp, &par.tp},
                               {request.pp, &par.pp},
                               {request.ep, &par.ep},
                               {request.etp, &par.etp}})
        if (flag > 0)
            *value = flag;
    if (request.firstStageLayers >= 0)
        par.firstStageLayers = request.firstStageLayers;
    if (request.lastStageLayers >= 0)
        par.lastStageLayers = request.lastStageLayers;
    if (request.dp > 0) {
        par.dpShard = request.dp;
    } else if (request.comm) { // one rank per process
        const int modelRanks = std::max(1, par.tp) * std::max(1, par.pp);
        if (request.comm->size() % modelRanks)
            return makeError(
                Error::Code::Unsupported,
                std::to_string(request.comm->size()) +
                    " processes do not divide into tp × pp = " + std::to_string(modelRanks));
        par.dpShard = request.comm->size() / modelRanks;
    }

    DiffOptions diffOptions;
    diffOptions.disabledRules = request.disabledRules;
    bool stopped = false;
    auto diff =
        diffAgainstLayout(*checkpoint, *layout, diffOptions, [&](uint64_t done, uint64_t total) {
            stopped = stopped || !control.report({"diff", done, total});
            return !stopped;
        });
    if (!diff && !stopped)
        return diff.error();
    if (stopped) {
        report.result.cancelled = true;
        return report;
    }
    if (!control.report({"plan", 0, 0})) {
        report.result.cancelled = true;
        return report;
    }
    auto plan = planLoad(*layout, *diff);
    if (!plan)
        return plan.error();
    report.parallel = plan->parallel;
    report.expertDp = plan->expertDp;

    VerifyOptions options;
    // Default: a quarter of physical memory.
    report.maxMemory = request.maxMemory ? request.maxMemory
                                         : uint64_t(sysconf(_SC_PHYS_PAGES)) *
                                               uint64_t(sysconf(_SC_PAGE_SIZE)) / 4;
    options.maxMemory = report.maxMemory;
    options.hash = request.hash;
    options.threads = request.threads;
    options.useGpu = request.useGpu;
    options.comm = request.comm;
    options.progress = [&control](uint64_t done, uint64_t total) {
        return control.report({"verify", done, total});
    };
    auto result = verifyLoad(*checkpoint, *layout, *diff, *plan, options);
    if (!result)
        return result.error();
    report.plan = std::make_shared<const LoadPlan>(std::move(*plan));
    report.result = std::move(*result);
    return report;
}

} // namespace shardscope
