// SPDX-License-Identifier: MIT
#include "fixcommand.h"
#include "frontdoor.h"
#include "inspectcommand.h"

#include <shardscope/escape.h>
#include <shardscope/session.h>
#include <shardscope/torchcompat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace shardscope::cli {

namespace {

std::string bytesText(uint64_t b)
{
    char s[32];
    if (b >= (uint64_t(1) << 30))
        std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(uint64_t(1) << 30));
    else if (b >= (uint64_t(1) << 20))
        std::snprintf(s, sizeof s, "%.2f MiB", double(b) / double(uint64_t(1) << 20));
    else if (b >= 1024)
        std::snprintf(s, sizeof s, "%.2f KiB", double(b) / 1024.0);
    else
        std::snprintf(s, sizeof s, "%llu bytes", (unsigned long long)b);
    return s;
}

// The stored tensors no parameter uses, kept or left out, and why (a few named).
void printUnused(const FixResult &f)
{
    for (const bool kept : {false, true}) {
        size_t n = 0;
        for (const FixUnused &u : f.unused)
            n += u.kept == kept;
        if (n == 0)
            continue;
        std::cout << (kept ? "kept, unused (" : "left out, unused (") << n << "):\n";
        size_t shown = 0;
        for (const FixUnused &u : f.unused)
            if (u.kept == kept && shown++ < 5)
                std::cout << "  " << visibleName(u.key) << "  (" << visibleText(u.why) << ")\n";
        if (n > 5)
            std::cout << "  … and " << n - 5 << " more\n";
    }
}

// fix --for-torch: which torch reads the source's metadata and the output's.
void printTorch(const FixResult &f)
{
    if (!f.forTorch)
        return;
    if (f.sourceTorch.applies)
        std::cout << "source read by: " << visibleText(f.sourceTorch.explained()) << "\n";
    if (f.outputTorch.applies)
        std::cout << "output read by: " << visibleText(f.outputTorch.explained())
                  << " (read back from disk)\n";
}

void printFix(const FixResult &f)
{
    if (f.alreadyLoads && !f.after) { // --for-torch alone
        std::cout << visibleName(f.checkpoint) << " is already read by torch " << f.forTorch->text()
                  << ": nothing written\n";
        printTorch(f);
        return;
    }
    if (f.alreadyLoads) {
        std::cout << visibleName(f.checkpoint) << " already loads as asked ("
                  << f.after->loadableModel << " of " << f.after->expectedModel
                  << " parameters): nothing to repair, nothing written\n";
        printUnused(f);
        return;
    }
    if (f.layout.empty() && f.forTorch) // metadata only: no load was asked about
        std::cout << (f.repaired() ? "rewritten for torch " + f.forTorch->text() + ": "
                      : f.written  ? "written, NOT read by torch " + f.forTorch->text() + ": "
                                   : "not rewritten for torch " + f.forTorch->text() + ": ");
    else
        std::cout << (f.repaired() ? "repaired: "
                      : f.written  ? "written, NOT a repair: "
                                   : "not repaired: ");
    std::cout << visibleName(f.checkpoint) << " (" << visibleText(f.format) << ")";
    if (f.written)
        std::cout << " -> " << visibleName(f.output);
    std::cout << "\n";
    for (const FixChangeCount &c : f.changes) {
        std::printf("  %-12s %6zu", c.kind.c_str(), c.count);
        std::fflush(stdout);
        if (!c.examples.empty())
            std::cout << "   e.g. " << visibleText(c.examples.front());
        std::cout << "\n";
    }
    if (!f.blockers.empty()) {
        printTorch(f);
        std::cout << (f.written ? "\nleft unloadable (" : "\ncannot be repaired (")
                  << f.blockers.size() << "):\n";
        for (const std::string &b : f.blockers)
            std::cout << "  " << visibleText(b) << "\n";
        if (!f.written)
            std::cout << (f.layout.empty() && f.forTorch
                              ? "nothing was written\n"
                              : "nothing was written; --partial writes what can be repaired\n");
    }
    if (!f.unused.empty()) {
        std::cout << "\n";
        printUnused(f);
    }
    if (!f.written)
        return;
    for (const std::string &c : f.copiedFromOutside)
        std::cout << "\ncopied: " << visibleText(c)
                  << " (a symlink out of the checkpoint: a hard link would share that file)";
    std::cout << "\ndata: " << f.filesLinked << " files hard-linked, " << f.filesSymlinked
              << " symlinked, " << f.filesCopied << " copied; " << bytesText(f.bytesReferenced)
              << " of stored tensors referenced by new keys, " << bytesText(f.bytesWritten)
              << " of tensor data written; "
              << (f.filesWritten ? std::to_string(f.filesWritten) + " files written anew"
                                 : "new .metadata " + bytesText(f.metadataBytes))
              << "\n";
    if (f.after)
        std::cout << "load:  " << f.after->loadableModel << " of " << f.after->expectedModel
                  << " parameters filled"
                  << (f.after->expectedOptimizer
                          ? ", " + std::to_string(f.after->loadableOptimizer) + " of " +
                                std::to_string(f.after->expectedOptimizer) + " optimizer states"
                          : std::string())
                  << "; " << actionName(f.after->outcome.action) << " (read back from disk)\n";
    printTorch(f);
    if (!f.stillFails.empty())
        std::cout << "NOT A REPAIR: the load as asked still fails on the output, which is kept "
                     "and marked so in its manifest: "
                  << visibleText(f.stillFails) << "\n";
    std::cout << "check: " << visibleText(f.diffCommand) << "\n";
    if (!f.verifyCommand.empty())
        std::cout << "       " << visibleText(f.verifyCommand) << "\n";
}

} // namespace

int runFix(const FixCommandOptions &o)
{
    FixRequest request;
    request.checkpoint = o.checkpoint;
    request.layout = o.layout;
    request.output = o.output;
    request.options.disabledRules = o.disabledRules;
    request.options.strictLoad = !o.partialLoad;
    request.options.includeOptimizer = !o.noOptimizer;
    auto strictness = strictnessFromName(o.strictness);
    if (!strictness) {
        std::cerr << "shardscope-cli: unknown --strictness '" << visibleText(o.strictness)
                  << "' (see Megatron's --dist-ckpt-strictness)\n";
        return ExitUnreadable;
    }
    request.options.strictness = *strictness;
    request.copy = o.copy;
    request.force = o.force;
    request.partial = o.partial;
    request.commandLine = o.commandLine;
    if (!o.forTorch.empty()) {
        request.forTorch = parseTorchVersion(o.forTorch);
        if (!request.forTorch || *request.forTorch < kOldestTorchChecked ||
            *request.forTorch > kNewestTorchChecked) {
            std::cerr << "shardscope-cli: --for-torch '" << visibleText(o.forTorch)
                      << "': a torch release from " << kOldestTorchChecked.text() << " to "
                      << kNewestTorchChecked.text() << " (what ShardScope knows torch reads)\n";
            return ExitUnreadable;
        }
    } else if (o.layout.empty()) {
        std::cerr << "shardscope-cli: fix needs --layout (what the model expects) or --for-torch "
                     "(a torch to write metadata for)\n";
        return ExitUnreadable;
    }
    auto sent = sentLayout(o.layout); // --ssh: a layout file here travels along
    if (!sent) {
        std::cerr << "shardscope-cli: " << sent.error().toString() << "\n";
        return ExitUnreadable;
    }
    request.openedLayout = *sent;
    // SHARDSCOPE_TIMING: each stage's start on stderr (where the seconds of a big fix go).
    JobControl control;
    if (std::getenv("SHARDSCOPE_TIMING")) {
        control.progress = [start = std::chrono::steady_clock::now(),
                            last = std::string()](const JobProgress &p) mutable {
            if (p.stage != last) {
                last = std::string(p.stage);
                std::fprintf(
                    stderr, "timing: %.3f s %s\n",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                    last.c_str());
            }
            return true;
        };
    }
    auto fixed = jobs::fix(request, control);
    if (!fixed) {
        std::cerr << "shardscope-cli: " << fixed.error().toString() << "\n";
        return ExitUnreadable;
    }
    if (o.json)
        std::cout << fixToJson(*fixed);
    else
        printFix(*fixed);
    const int code = fixed->alreadyLoads || fixed->repaired() ? ExitHealthy : ExitProblems;
    // Freeing a DeepSeek-V3-scale repair's heap (1.7 M chunks, two diffs) takes two seconds of
    // a five-second job, for nothing: the process ends. Small jobs end normally (and stay under
    // the sanitizers' leak check).
    if (fixed->index && fixed->index->chunkCount() > 1'000'000) {
        std::cout.flush();
        std::fflush(nullptr);
        shardscope::waitForIndexWrites(); // the source's entry, if this open stored one
        std::_Exit(code);
    }
    return code;
}

} // namespace shardscope::cli
