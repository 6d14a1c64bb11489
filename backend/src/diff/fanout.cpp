// SPDX-License-Identifier: MIT
// The parameter loops, over threads: each parameter's entries have their place before any is
// evaluated, the threads fill them in any order, the result is in layout order.
#include "diff/differ.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>
#include <utility>

namespace shardscope::detail {

namespace {
thread_local Scratch *t_scratch = nullptr;
} // namespace

Scratch &scratch()
{
    return *t_scratch;
}

ScratchScope::ScratchScope(Scratch &own)
    : m_outer(std::exchange(t_scratch, &own))
{}

ScratchScope::~ScratchScope()
{
    t_scratch = m_outer;
}

void mark(bool &flag)
{
    std::atomic_ref<bool>(flag).store(true, std::memory_order_relaxed);
}

bool forEachIndex(size_t n, unsigned workers, const std::function<void(size_t)> &fn,
                  const std::function<bool(size_t done)> &keepGoing)
{
    // Blocks small enough that every thread gets several (progress and cancel come per block).
    const size_t kBlock = std::clamp<size_t>(n / (8 * size_t(std::max(workers, 1u))), 1, 64);
    std::atomic<size_t> next{0}, done{0};
    std::atomic<bool> stop{false};
    std::exception_ptr failure;
    std::mutex failureMutex;
    auto work = [&](bool caller) {
        Scratch own;
        ScratchScope scope(own);
        try {
            for (size_t b = next.fetch_add(kBlock); b < n && !stop.load(std::memory_order_relaxed);
                 b = next.fetch_add(kBlock)) {
                for (size_t i = b; i < std::min(n, b + kBlock); ++i)
                    fn(i);
                const size_t length = std::min(n, b + kBlock) - b;
                const size_t d = done.fetch_add(length) + length;
                if (caller && keepGoing && !keepGoing(d))
                    stop = true;
            }
        } catch (...) {
            std::lock_guard lock(failureMutex);
            failure = failure ? failure : std::current_exception();
            stop = true;
        }
    };
    std::vector<std::thread> threads;
    try {
        for (unsigned w = 1; w < workers && w * kBlock < n; ++w)
            threads.emplace_back(work, false);
    } catch (const std::system_error &) { // no more threads to be had: fewer do it
    }
    work(true);
    for (std::thread &t : threads)
        t.join();
    if (failure)
        std::rethrow_exception(failure);
    // The other threads may have taken every block: the caller asks at least once.
    return !stop.load() && (!keepGoing || keepGoing(n));
}

unsigned Differ::workers() const
{
    if (m_legacy)
        return 1;
    if (m_options.threads > 0)
        return unsigned(m_options.threads);
    return m_params.size() < 4096 ? 1u : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
}

bool Differ::evaluateModel(DiffResult &r, const Progress &progress, unsigned threads)
{
    const uint64_t total = 2 * m_params.size();
    std::vector<uint32_t> slot(m_params.size(), UINT32_MAX);
    uint32_t count = 0;
    for (size_t i = 0; i < m_params.size(); ++i)
        if (!(m_params[i].param.name.ends_with("._extra_state") && enabled("extra_state")))
            slot[i] = count++; // extra_state: dropped on save and load alike
    r.entries.resize(count);
    if (!forEachIndex(
            m_params.size(), threads,
            [&](size_t i) {
                if (slot[i] != UINT32_MAX)
                    r.entries[slot[i]] = evaluate(m_params[i], {});
            },
            [&](size_t done) { return !progress || progress(done, total); }))
        return false;
    for (const DiffEntry &e : r.entries) {
        ++r.expectedModel;
        r.loadableModel += e.realLoadFills;
    }
    return true;
}

std::vector<uint32_t> Differ::optimizerSlots(uint32_t &count) const
{
    std::vector<uint32_t> slot(m_params.size(), UINT32_MAX);
    count = 0;
    for (size_t i = 0; i < m_params.size(); ++i) {
        const LayoutParam &p = m_params[i].param;
        if (p.hasOptimizerState && !p.name.ends_with("._extra_state"))
            slot[i] = count++;
    }
    return slot;
}

bool Differ::evaluateOptimizer(DiffResult &r, const Progress &progress, unsigned threads)
{
    const uint64_t total = 2 * m_params.size();
    std::vector<std::string> states = m_layout.optimizerStates;
    if (m_layout.optimizerStep && !m_torchDist) // torch_dist keeps step in param_groups
        states.push_back("step");
    // torch_dist's distributed optimizer also stores the fp32 main parameters.
    if (!m_disk.mainParamState.empty() &&
        std::find(states.begin(), states.end(), m_disk.mainParamState) == states.end())
        states.push_back(m_disk.mainParamState);
    const size_t base = r.entries.size();
    uint32_t count = 0;
    const std::vector<uint32_t> slot = optimizerSlots(count);
    // paramGroups() adds one entry per parameter: room for them now, not a reallocation moving
    // every entry.
    r.entries.reserve(base + size_t(count) * (states.size() + 1));
    r.entries.resize(base + size_t(count) * states.size());
    if (!forEachIndex(
            m_params.size(), threads,
            [&](size_t i) {
                if (slot[i] == UINT32_MAX)
                    return;
                for (size_t s = 0; s < states.size(); ++s)
                    r.entries[base + slot[i] * states.size() + s] =
                        evaluate(m_params[i], states[s]);
            },
            [&](size_t done) { return !progress || progress(m_params.size() + done, total); }))
        return false;
    for (size_t e = base; e < r.entries.size(); ++e) {
        ++r.expectedOptimizer;
        r.loadableOptimizer += r.entries[e].realLoadFills;
    }
    return true;
}

void Differ::paramGroups(DiffResult &r, unsigned threads)
{
    // The hyperparameter the request names first: DCP flattens each group dict in its own
    // order, which the saving run's groups show.
    std::string firstLeaf;
    if (!m_disk.groupMeta.empty()) {
        const std::string_view k = m_disk.keys[m_disk.groupMeta.begin()->second].key;
        firstLeaf = "." + std::string(k.substr(k.rfind('.') + 1));
    }
    uint32_t count = 0;
    const std::vector<uint32_t> slot = optimizerSlots(count);
    const size_t base = r.entries.size();
    r.entries.resize(base + count);
    forEachIndex(m_params.size(), threads,
                 [&](size_t i) {
                     if (slot[i] != UINT32_MAX)
                         r.entries[base + slot[i]] = groupEntry(m_params[i].param, firstLeaf);
                 },
                 {});
    for (DiskKey &k : m_disk.keys)
        if (k.key.starts_with("optimizer.param_to_group_meta."))
            k.used = true;
}

} // namespace shardscope::detail
