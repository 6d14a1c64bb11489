// SPDX-License-Identifier: MIT
#include "difftext.h"

#include <shardscope/escape.h>
#include <shardscope/keyfold.h>
#include <shardscope/report.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace shardscope::cli {

namespace {

std::string countSuffix(size_t n)
{
    return n > 1 ? "  (" + std::to_string(n) + ")" : std::string();
}

std::string note(std::string_view text)
{
    return text.empty() ? std::string() : "  (" + visibleText(text) + ")";
}

// A list of keys: folded into patterns (each with its count), or every key with `all`.
void printKeys(std::ostream &out, const std::vector<std::string> &keys, bool all)
{
    if (all) {
        for (const std::string &k : keys)
            out << "  " << visibleName(k) << "\n";
        return;
    }
    std::vector<std::string> unique;
    std::set<std::string_view> seen;
    for (const std::string &k : keys)
        if (seen.insert(k).second)
            unique.push_back(k);
    for (const FoldedName &f : foldNames(unique))
        out << "  " << visibleName(f.pattern) << countSuffix(f.members.size()) << "\n";
}

void printEntry(std::ostream &out, const DiffEntry &e, std::string_view name, size_t count,
                std::string_view reason, std::string_view fix)
{
    out << (e.realLoadFills ? "  " : "! ") << statusName(e.status) << "  " << visibleName(name)
        << countSuffix(count);
    if (!reason.empty())
        out << "\n      " << visibleText(reason);
    if (!e.realLoadFills && !fix.empty())
        out << "\n      fix: " << visibleText(fix);
    out << "\n";
}

void printRepair(std::ostream &out, const RepairPreview &r)
{
    out << "\nREPAIR:\n";
    if (r.command.empty()) {
        out << "  " << visibleText(r.unsupported) << "\n";
        return;
    }
    std::string kinds;
    bool copies = false;
    for (const auto &[kind, n] : r.changes) {
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
        copies = copies || kind == "rewrite";
    }
    out << "  " << visibleText(r.command) << "\n      "
        << (r.blockers.empty()
                ? "writes a checkpoint this load accepts (" + kinds + "): " +
                      (!r.dataWritten.empty() ? r.dataWritten
                       : copies               ? "the rewritten keys copied into one new data "
                                                "file, everything else referenced"
                                              : "no tensor data copied")
                : "repairs what it can (" + (kinds.empty() ? std::string("nothing") : kinds) +
                      "); nothing is written without --partial while these "
                      "remain:")
        << "\n";
    for (size_t i = 0; i < r.blockers.size() && i < 10; ++i)
        out << "  cannot: " << visibleText(r.blockers[i]) << "\n";
    if (r.blockers.size() > 10)
        out << "  cannot: … and " << r.blockers.size() - 10 << " more\n";
}

} // namespace

void printDiffText(std::ostream &out, const DiffResult &d, bool all)
{
    out << "checkpoint: " << visibleName(d.checkpoint) << " (" << visibleText(d.format) << ")\n"
        << "layout:     " << visibleName(d.against) << "\n";
    if (d.torchReadable.applies)
        out << "read by:    " << visibleText(d.torchReadable.explained()) << "\n";
    out << "model:      " << d.loadableModel << " of " << d.expectedModel
        << " parameters filled by a real load\n";
    if (d.expectedOptimizer)
        out << "optimizer:  " << d.loadableOptimizer << " of " << d.expectedOptimizer
            << " states filled\n";
    out << "load:       " << actionName(d.outcome.action);
    if (!d.outcome.message.empty())
        out << ": " << visibleText(d.outcome.message);
    out << "\n";
    for (const std::string &w : d.outcome.warnings)
        out << "warning:    " << visibleText(w) << "\n";
    if (!d.outcome.keptAtInit.empty()) {
        out << "\nSILENTLY KEPT AT INITIAL VALUES (" << d.outcome.keptAtInit.size() << "):\n";
        printKeys(out, d.outcome.keptAtInit, all);
    }
    if (!d.outcome.loadedWrong.empty()) {
        out << "\nSILENTLY FILLED FROM THE WRONG KEY (" << d.outcome.loadedWrong.size() << "):\n";
        printKeys(out, d.outcome.loadedWrong, all);
    }

    std::vector<size_t> initial, problems, healthy;
    for (size_t i = 0; i < d.entries.size(); ++i) {
        const DiffEntry &e = d.entries[i];
        if (!e.looksInitial.empty())
            initial.push_back(i);
        (isLoadProblem(e) ? problems : healthy).push_back(i);
    }
    if (!initial.empty()) {
        out << "\nLOADS VALUES THAT LOOK FRESHLY INITIALISED (" << initial.size() << "):\n";
        if (all) {
            for (size_t i : initial)
                out << "  " << visibleName(d.entries[i].name) << "\n      "
                    << visibleText(d.entries[i].looksInitial) << "\n";
        } else {
            std::vector<std::string> names;
            for (size_t i : initial)
                names.push_back(d.entries[i].name);
            // Each text holds its tensor's mean and std: the names fold, and the first text
            // stands for its group.
            for (const FoldedName &f : foldNames(names)) {
                const DiffEntry &e = d.entries[initial[f.members.front()]];
                out << "  " << visibleName(f.pattern) << countSuffix(f.members.size()) << "\n      "
                    << (f.members.size() > 1 ? "first: " : "") << visibleText(e.looksInitial)
                    << "\n";
            }
        }
    }

    if (all) {
        out << "\nENTRIES (" << d.entries.size() << "):\n";
        for (const DiffEntry &e : d.entries)
            printEntry(out, e, e.name, 1, e.reason, e.fix);
    } else if (!problems.empty()) {
        const auto groups = foldDiffEntries(d, problems);
        out << "\nPROBLEMS (" << problems.size() << (problems.size() == 1 ? " entry" : " entries")
            << " in " << groups.size() << (groups.size() == 1 ? " group" : " groups") << "):\n";
        for (const DiffEntryGroup &g : groups)
            printEntry(out, d.entries[g.entries.front()], g.pattern, g.entries.size(), g.reason,
                       g.fix);
    }

    if (!d.unconsumed.empty()) {
        out << "\nunconsumed keys (" << d.unconsumed.size() << "):\n";
        if (all) {
            for (const UnconsumedKey &u : d.unconsumed)
                out << "  " << visibleName(u.key) << note(u.note) << "\n";
        } else {
            for (const UnconsumedKeyGroup &g : foldUnconsumed(d))
                out << "  " << visibleName(g.pattern) << countSuffix(g.keys.size()) << note(g.note)
                    << "\n";
        }
    }
    if (d.repair)
        printRepair(out, *d.repair);

    // The rules working: counted per status, in the statuses' order.
    std::map<LoadStatus, size_t> counts;
    for (size_t i : healthy)
        ++counts[d.entries[i].status];
    out << "\nhealthy:   ";
    const char *sep = " ";
    for (const auto &[status, n] : counts) {
        out << sep << statusName(status) << " " << n;
        sep = ", ";
    }
    out << (counts.empty() ? " none" : "") << " (" << healthy.size()
        << (healthy.size() == 1 ? " entry" : " entries") << " the load fills as the layout asks)\n";
    if (!all)
        out << "--all lists all " << d.entries.size()
            << " entries one by one; --json gives every field\n";
}

void printCheckpointDiffText(std::ostream &out, const CheckpointDiff &d, bool all)
{
    out << visibleName(d.first) << " against " << visibleName(d.second) << ": " << d.same
        << " same, " << d.changes.size() << " changes\n";
    for (const auto &[name, r] :
         {std::pair{&d.first, &d.firstTorch}, std::pair{&d.second, &d.secondTorch}})
        if (r->applies)
            out << "  " << visibleName(*name) << " is read by: " << visibleText(r->explained())
                << "\n";
    auto line = [&](KeyChange::Kind kind, std::string_view key, std::string_view other,
                    std::string_view rule, std::string_view detail, size_t count) {
        out << "  " << changeName(kind) << "  " << visibleName(key);
        if (!other.empty() && other != key)
            out << " -> " << visibleName(other);
        if (!rule.empty())
            out << "  (rule " << visibleText(rule) << ")";
        if (!detail.empty())
            out << "  " << visibleText(detail);
        out << countSuffix(count) << "\n";
    };
    if (all) {
        for (const KeyChange &c : d.changes)
            line(c.kind, c.key, c.otherKey, c.rule, c.detail, 1);
        return;
    }
    const std::vector<KeyChangeGroup> groups = foldKeyChanges(d);
    for (const KeyChangeGroup &g : groups)
        line(g.kind, g.pattern, g.otherPattern, g.rule, g.detail, g.changes.size());
    if (groups.size() < d.changes.size())
        out << "--all lists all " << d.changes.size() << " changes, one per line\n";
}

} // namespace shardscope::cli
