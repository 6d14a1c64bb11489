// SPDX-License-Identifier: MIT
// diff A --against B --values: the value comparison, in one process or as one rank of a job.
#include "diffcommand.h"
#include "frontdoor.h"
#include "inspectcommand.h"
#include "jobexit.h"
#include "progressbar.h"

#include <shardscope/escape.h>
#include <shardscope/session.h>

#include <algorithm>
#include <iostream>
#include <unistd.h>
#include <utility>
#include <vector>

namespace shardscope::cli {

ValueDiffRequest valueRequest(const DiffCommandOptions &o)
{
    ValueDiffRequest r;
    r.first = o.checkpoint;
    r.second = o.against.value_or("");
    r.layout = o.layout.value_or("");
    r.disabledRules = o.disabledRules;
    r.rtol = o.rtol;
    r.atol = o.atol;
    r.includeOptimizer = !o.noOptimizer;
    r.maxMemory = o.maxMemory;
    r.threads = o.threads;
    r.useGpu = !o.noGpu;
    r.allowNotCompared = o.allowNotCompared;
    return r;
}

namespace {

// Two places: element by element would move every tensor's bytes over ssh, so each side's
// tensors are hashed where they live and only the digests travel.
int runValuesByHash(const DiffCommandOptions &o)
{
    if (o.layout || o.rtol != 0 || o.atol != 0) {
        std::cerr << "shardscope-cli: checkpoints in two places are compared by each stored "
                     "tensor's SHA-256, which takes no --layout or tolerance (run --values on a "
                     "host that holds both for those)\n";
        return ExitUnreadable;
    }
    catchInterrupt(true);
    JobControl control;
    control.cancel = interruptToken();
    std::vector<Result<InspectResult>> sides;
    for (auto [at, path] : {std::pair{o.checkpointAt, o.checkpoint},
                            std::pair{o.againstAt, o.against.value_or("")}}) {
        InspectRequest r;
        r.path = path;
        r.hash = true;
        sides.push_back(at ? at->runInspect(r, control) : runInspect(r, control));
        if (!sides.back())
            break;
    }
    catchInterrupt(false);
    for (const auto &side : sides)
        if (!side) {
            std::cerr << "shardscope-cli: " << side.error().toString() << "\n";
            return ExitUnreadable;
        }
    ValueDiffResult result = valuesByHash(*sides[0], *sides[1]);
    result.allowNotCompared = o.allowNotCompared;
    const auto first = std::find_if(result.tensors.begin(), result.tensors.end(),
                                    [](const TensorValueDiff &t) { return t.unreadable; });
    if (first != result.tensors.end())
        std::cerr << "shardscope-cli: " << visibleText(first->why) << "\n";
    std::cout << (o.json ? valueDiffToJson(result) : renderValueDiffText(result));
    return result.unreadable() ? ExitUnreadable : result.passes() ? ExitHealthy : ExitProblems;
}

} // namespace

int runValues(const DiffCommandOptions &o)
{
    if (o.acrossHosts)
        return runValuesByHash(o);
    const CommBackend backend = o.backend == "gloo"   ? CommBackend::Gloo
                                : o.backend == "nccl" ? CommBackend::Nccl
                                                      : CommBackend::Auto;
    // With --ssh the job runs there, in the server's process.
    auto comm = remote() ? Result<std::unique_ptr<Communicator>>(nullptr) : joinJob(backend);
    if (!comm) {
        std::cerr << "shardscope-cli: " << comm.error().toString() << "\n";
        return ExitUnreadable;
    }
    const bool leader = !*comm || (*comm)->rank() == 0; // prints; the others stay quiet
    ValueDiffRequest request = valueRequest(o);
    request.comm = comm->get();
    if (o.layout) {
        auto sent = sentLayout(*o.layout);
        if (!sent) {
            std::cerr << "shardscope-cli: " << sent.error().toString() << "\n";
            return ExitUnreadable;
        }
        request.openedLayout = *sent;
    }

    catchInterrupt(true);
    Result<ValueDiffResult> result = makeError(Error::Code::Internal, "not run");
    {
        ProgressBar bar(leader && !o.json && isatty(STDERR_FILENO));
        JobControl control;
        control.cancel = interruptToken();
        control.progress = [&bar](const JobProgress &p) {
            if (p.stage == "compare")
                bar.update(p.done, p.total);
            return true;
        };
        result = jobs::valueDiff(request, control);
    }
    catchInterrupt(false);
    if (!result) {
        std::cerr << "shardscope-cli: " << result.error().toString() << "\n";
        return ExitUnreadable;
    }
    // 1 for differences and for tensors that could not be compared (unless allowed): a
    // comparison that skipped some says nothing about them.
    const int code = result->cancelled || result->unreadable() ? ExitUnreadable
                     : result->passes()                        ? ExitHealthy
                                                               : ExitProblems;
    RanksFinish done{comm->get()};
    if (!leader)
        return code;
    // Exit 2 says why in one line: the first unreadable tensor, and how many more there are
    // (--json lists every one with its file, key and offset).
    const auto first = std::find_if(result->tensors.begin(), result->tensors.end(),
                                    [](const TensorValueDiff &t) { return t.unreadable; });
    if (first != result->tensors.end()) {
        const size_t more = result->unreadable() - 1;
        std::cerr << "shardscope-cli: " << visibleText(first->why);
        if (more)
            std::cerr << " (and " << more << " more unreadable tensor" << (more == 1 ? "" : "s")
                      << "; --json lists every one)";
        std::cerr << "\n";
    }
    std::cout << (o.json ? valueDiffToJson(*result) : renderValueDiffText(*result));
    return code;
}

} // namespace shardscope::cli
