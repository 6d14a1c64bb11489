// SPDX-License-Identifier: MIT
#include "verifycommand.h"
#include "frontdoor.h"
#include "inspectcommand.h"
#include "jobexit.h"
#include "progressbar.h"

#include <shardscope/escape.h>
#include <shardscope/session.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <unistd.h>

namespace shardscope::cli {

namespace {

int fail(const Error &e)
{
    std::cerr << "shardscope-cli: " << e.toString() << "\n";
    return ExitUnreadable;
}

void printText(const VerifyReport &report)
{
    const VerifyResult &result = report.result;
    const size_t loadable = result.checked - result.keptInitial;
    const ParallelConfig &pc = report.parallel;
    std::cout << "world " << result.world << " (tp " << pc.tp << " × dp " << pc.dpShard << " × pp "
              << pc.pp << "; experts ep " << pc.ep << " × etp " << pc.etp << " × dp "
              << report.expertDp << "; health on " << report.healthDevice()
              << (result.processes > 1 ? ", " + std::to_string(result.processes) +
                                             " processes over " + result.backend
                                       : ", one process, " + std::to_string(result.threads) +
                                             (result.threads > 1 ? " threads" : " thread"))
              << ")\n"
              << result.identical << " of " << loadable
              << " loadable parameters bit-identical after gathering every rank's shard, "
              << result.mismatched << " mismatches across ranks"
              << (result.wrongSource ? ", " + std::to_string(result.wrongSource) +
                                           " of them loaded from the wrong key"
                                     : std::string())
              << "\n"
              << (result.checked - result.roundTripFailures) << " of " << result.checked
              << " re-split into the stored tensors bit for bit\n";
    if (result.notChecked)
        std::cout << result.notChecked
                  << " not checked (buffers, loaded whole by every rank: --json names each, "
                     "with the diff's verdict)\n";
    for (const ParamCheck &c : result.params)
        if (c.outcome == ParamCheck::Outcome::Mismatch || !c.roundTrip)
            std::cout << "! " << visibleName(c.name) << ": " << c.mismatches
                      << " mismatches, first at " << c.firstMismatch
                      << (c.note.empty() ? "" : "; " + visibleText(c.note)) << "\n";
    if (result.keptInitial) {
        std::cout << "\nKEPT AT THEIR INITIAL VALUES (" << result.keptInitial << "):\n";
        for (const ParamCheck &c : result.params)
            if (c.outcome == ParamCheck::Outcome::KeptInitial)
                std::cout << "  " << visibleName(c.name) << "\n";
    }
    if (result.wrongSource) {
        std::cout << "\nFILLED FROM THE WRONG KEY (" << result.wrongSource << "):\n";
        for (const ParamCheck &c : result.params)
            if (c.outcome == ParamCheck::Outcome::WrongSource)
                std::cout << "  " << visibleName(c.name) << ": " << visibleText(c.note) << "\n";
    }
    if (result.unreadable) {
        std::cout << "\nUNREADABLE: THE LOAD RAISES READING THEM (" << result.unreadable << "):\n";
        for (const ParamCheck &c : result.params)
            if (c.outcome == ParamCheck::Outcome::Unreadable)
                std::cout << "  " << visibleName(c.name) << ": " << visibleText(c.note) << "\n";
    }
    std::cout << double(result.bytesRead) / (1 << 20) << " MiB read in " << result.seconds << " s"
              << (result.cancelled ? " (stopped)" : "") << "\n";
    if (result.clean()) {
        std::cout << "\nThis proves:\n";
        for (const std::string &line : verifyProves())
            std::cout << "  - " << line << "\n";
    }
    std::cout << "It does not prove:\n";
    for (const std::string &line : verifyDoesNotProve())
        std::cout << "  - " << line << "\n";
}

} // namespace

int runVerify(const VerifyCommandOptions &o)
{
    // Launched as one of several processes (torchrun, srun): join the job first, so that a rank
    // that cannot does not leave the others waiting at their first collective.
    const CommBackend backend = o.backend == "gloo"   ? CommBackend::Gloo
                                : o.backend == "nccl" ? CommBackend::Nccl
                                                      : CommBackend::Auto;
    // With --ssh the job runs there (in the server, or as the job it launches).
    auto comm = remote() ? Result<std::unique_ptr<Communicator>>(nullptr) : joinJob(backend);
    if (!comm)
        return fail(comm.error());
    const bool leader = !*comm || (*comm)->rank() == 0; // prints; the others stay quiet

    VerifyRequest request = o.request;
    request.comm = comm->get();
    auto sent = sentLayout(request.layout);
    if (!sent)
        return fail(sent.error());
    request.openedLayout = *sent;
    // A job a server launched (SHARDSCOPE_PROGRESS_LINES): rank 0 says how far it is on
    // stderr, a line at a time, for the server to relay.
    const bool progressLines = leader && std::getenv("SHARDSCOPE_PROGRESS_LINES");

    catchInterrupt(true);
    Result<VerifyReport> report = makeError(Error::Code::Internal, "not run");
    {
        ProgressBar bar(leader && !o.quiet && !o.json && isatty(STDERR_FILENO));
        JobControl control;
        control.cancel = interruptToken();
        control.progress = [&bar, progressLines, last = std::string(),
                            at = std::chrono::steady_clock::time_point()](
                               const JobProgress &p) mutable {
            if (p.stage == "verify")
                bar.update(p.done, p.total);
            const auto now = std::chrono::steady_clock::now();
            if (progressLines && (p.stage != last || now - at > std::chrono::milliseconds(100) ||
                                  (p.total && p.done == p.total))) {
                last = std::string(p.stage);
                at = now;
                std::fprintf(stderr, "shardscope-progress %s %llu %llu\n", last.c_str(),
                             (unsigned long long)p.done, (unsigned long long)p.total);
            }
            return true;
        };
        report = jobs::verify(request, control, o.launch);
    }
    catchInterrupt(false);
    if (!report)
        return fail(report.error());
    const VerifyResult &result = report->result;
    const int code = result.cancelled ? ExitUnreadable
                     : result.clean() ? ExitHealthy
                                      : ExitProblems;
    // Every rank has the whole result and rank 0 reports it; the others wait until it has
    // (a launcher stops the whole job when one rank exits with a non-zero code).
    RanksFinish done{comm->get()};
    if (!leader)
        return code;
    if (o.json)
        std::cout << verifyToJson(*report);
    else
        printText(*report);
    return code;
}

} // namespace shardscope::cli
