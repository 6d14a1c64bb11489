// SPDX-License-Identifier: MIT
#include "inspectcommand.h"

#include "frontdoor.h"
#include "keytree.h"

#include <shardscope/escape.h>
#include <shardscope/session.h>
#include <shardscope/torchcompat.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

namespace fs = std::filesystem;

namespace shardscope::cli {

namespace {

std::string shapeText(std::span<const int64_t> shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string bytesText(uint64_t b)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

// Groups of up to this many keys list every key; larger ones fold into one line.
constexpr size_t kListedProblems = 16;

void printProblems(const std::vector<Problem> &problems, bool all)
{
    if (all) {
        for (const Problem &p : problems)
            std::cerr << "problem: " << p.toString() << "\n";
        return;
    }
    // A missing or cut data file breaks every key it holds: one line per cause and file, and
    // each key's own line only where a group is small enough to read.
    for (const ProblemGroup &g : groupProblems(problems)) {
        if (g.members.size() <= kListedProblems) {
            for (size_t m : g.members)
                std::cerr << "problem: " << problems[m].toString() << "\n";
        } else {
            std::cerr << "problem: " << g.headline(problems) << "; --all-problems lists them\n";
        }
    }
}

} // namespace

int runInspect(const InspectOptions &o)
{
    auto inspected = jobs::inspect(o.request);
    if (!inspected) {
        std::cerr << "shardscope-cli: " << inspected.error().toString() << "\n";
        return ExitUnreadable;
    }
    const CheckpointIndex &index = *inspected->index;
    const std::vector<Problem> &problems = inspected->problems;

    if (o.json) {
        std::cout << inspectToJson(*inspected, o.request.path);
    } else {
        uint64_t bytes = 0, chunks = 0;
        for (const TensorEntry &t : index.tensors) {
            bytes += t.nbytes();
            chunks += t.chunks.size();
        }
        std::cout << visibleName(index.inputPath) << "\n  format: " << formatName(index.format);
        if (auto it = index.info.find("iteration"); it != index.info.end())
            std::cout << ", iteration " << visibleText(it->second);
        std::cout << "\n  " << index.tensors.size() << " tensors (" << bytesText(bytes) << ") in "
                  << chunks << " chunks across " << index.files.size() << " files; "
                  << index.objects.size() << " objects\n";
        if (index.dataDir != index.inputPath && index.dataDir != ".")
            std::cout << "  data: " << visibleName(index.dataDir) << "\n";
        if (index.info.count("dcp.storage_reader"))
            std::cout << "  safetensors shards read as torch's HuggingFaceStorageReader reads "
                         "them (DCP_SHARDING_INFO)\n";
        if (const TorchReadability r = torchReadability(index); r.applies)
            std::cout << "  read by: " << visibleText(r.explained()) << "\n";
        if (auto it = index.info.find("repaired_from"); it != index.info.end())
            std::cout << "  repaired from " << visibleName(it->second)
                      << " by shardscope-cli fix\n";
        std::cout << "\n";
        KeyTree tree;
        for (const InspectedTensor &r : inspected->tensors) {
            const TensorEntry &t = *r.entry;
            std::string summary =
                t.chunks.size() == 1 ? std::string() : std::to_string(t.chunks.size()) + " chunks";
            if (!r.sha256.empty())
                summary += (summary.empty() ? "" : "  ") + ("sha256 " + r.sha256.substr(0, 16));
            if (!r.looksInitial.empty())
                summary += (summary.empty() ? "" : "  ") + std::string("looks initial");
            tree.add(t.key, visibleText(t.dtypeName) + " " + shapeText(t.shape), summary);
        }
        for (const InspectedObject &ob : inspected->objects)
            tree.add(ob.entry->key, "object", visibleText(ob.summary));
        if (o.collapse && !o.request.tensor)
            tree.collapse();
        std::cout << tree.render();
        if (o.request.tensor) {
            for (const InspectedTensor &r : inspected->tensors) {
                const TensorEntry &t = *r.entry;
                std::cout << "\n"
                          << visibleName(t.key) << "\n  dtype " << visibleText(t.dtypeName)
                          << ", shape " << shapeText(t.shape) << ", " << bytesText(t.nbytes())
                          << "\n";
                for (size_t c = 0; c < t.chunks.size(); ++c) {
                    const Location &l = t.chunks[c];
                    std::cout << "  chunk " << c << ": offsets " << shapeText(t.chunkOffsets(c))
                              << " sizes " << shapeText(t.chunkSizes(c)) << "  "
                              << (l.file < index.files.size() ? visibleName(index.files[l.file])
                                                              : "?")
                              << " @" << l.offset << " +" << l.length << "\n";
                }
                if (r.health) {
                    const TensorHealth &s = *r.health;
                    if (s.finite)
                        std::printf("  min %.9g  max %.9g  mean %.9g  std %.9g  l2 %.9g\n", s.min,
                                    s.max, s.mean, s.std, s.l2);
                    std::printf("  %lld elements: %lld finite, %lld NaN, %lld +Inf, %lld -Inf\n",
                                (long long)s.count, (long long)s.finite, (long long)s.nanCount,
                                (long long)s.posInfCount, (long long)s.negInfCount);
                    std::fflush(stdout);
                }
                if (!r.sha256.empty())
                    std::cout << "  sha256 " << r.sha256 << "\n";
                if (!r.looksInitial.empty())
                    std::cout << "  looks freshly initialised: " << visibleText(r.looksInitial)
                              << "\n";
            }
        }
    }
    std::cout.flush();
    printProblems(problems, o.allProblems);
    return problems.empty() ? ExitHealthy : ExitProblems;
}

} // namespace shardscope::cli
