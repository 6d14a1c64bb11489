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

int runValues(const DiffCommandOptions &o)
{
    if (o.acrossHosts) {
        // Element by element needs both sides' bytes in one process: terabytes over ssh.
        std::cerr << "shardscope-cli: --values compares element by element where both "
                     "checkpoints are; these are in two places (compare their structure "
                     "without --values, or run --values on a host that holds both)\n";
        return ExitUnreadable;
    }
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
