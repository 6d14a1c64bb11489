// SPDX-License-Identifier: MIT
// The load diff: what a model expects (a Layout) against what a checkpoint holds. This file
// runs the stages in order; differ.h says where each lives.
#include "diff/differ.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace shardscope {

namespace detail {

namespace {

// SHARDSCOPE_TIMING: each stage's milliseconds on stderr (where a rule toggle's time goes).
class StageClock
{
public:
    void lap(const char *stage)
    {
        if (!m_on)
            return;
        const auto now = std::chrono::steady_clock::now();
        std::fprintf(stderr, "diff: %s %.1f ms\n", stage,
                     std::chrono::duration<double, std::milli>(now - m_last).count());
        m_last = now;
    }

private:
    bool m_on = std::getenv("SHARDSCOPE_TIMING") != nullptr;
    std::chrono::steady_clock::time_point m_last = std::chrono::steady_clock::now();
};

} // namespace

std::optional<DiffResult> Differ::run(const Progress &progress)
{
    Scratch mine; // for what runs on this thread outside forEachIndex
    ScratchScope scope(mine);
    DiffResult r;
    r.options = m_options;
    r.format = std::string(formatName(m_index.format));
    r.torchReadable = torchReadability(m_index);
    r.checkpoint = m_index.inputPath;
    const unsigned threads = workers();
    StageClock clock;
    if (!evaluateModel(r, progress, threads))
        return std::nullopt;
    clock.lap("model");
    applyTies(r);
    // Transformer Engine's extra state: asked for as entries of their own, not counted as
    // parameters (fsdp_dtensor drops them on save and load alike).
    if ((m_layout.transformerEngine || m_layout.linearExtraState) &&
        !(m_fsdpDtensorLoad && enabled("extra_state")))
        for (const std::string &name : teModules())
            r.entries.push_back(evaluateExtraState(name));
    const bool hasOptimizer = m_disk.optNameFirst.size() + m_disk.optStateFirst.size() > 0;
    if (m_options.includeOptimizer && hasOptimizer && !evaluateOptimizer(r, progress, threads))
        return std::nullopt;
    clock.lap("optimizer");
    if (m_options.includeOptimizer && !m_disk.groupMeta.empty())
        paramGroups(r, threads);
    collectUnconsumed(r);
    noteTiedUnconsumed(r);
    clock.lap("unconsumed");
    assembleOutcome(r);
    clock.lap("outcome");
    // The options' callback views the caller's checkpoint: not for the result to keep.
    r.options.sameValues = nullptr;
    if (progress)
        progress(2 * m_params.size(), 2 * m_params.size());
    return r;
}

} // namespace detail

namespace {

Result<DiffResult> diffIndex(const CheckpointIndex &checkpoint,
                             const std::shared_ptr<const CheckpointIndex> &shared,
                             const Layout &layout, const DiffOptions &options,
                             const std::function<bool(uint64_t, uint64_t)> &progress)
{
    for (const std::string &r : options.disabledRules) {
        const auto &rules = allRules();
        if (std::none_of(rules.begin(), rules.end(),
                         [&](const RuleInfo &i) { return i.name == r; }))
            return makeError(Error::Code::NotFound, "unknown rule '" + r + "'");
    }
    detail::StageClock clock;
    std::optional<DiffResult> r;
    {
        detail::Differ differ(checkpoint, layout, options, shared);
        clock.lap("set-up");
        r = differ.run(progress);
        clock.lap("run");
    }
    clock.lap("freed");
    if (!r)
        return makeError(Error::Code::Cancelled, "cancelled");
    r->against = layout.source;
    return std::move(*r);
}

} // namespace

Result<DiffResult> diffAgainstLayout(const CheckpointIndex &checkpoint, const Layout &layout,
                                     const DiffOptions &options,
                                     const std::function<bool(uint64_t, uint64_t)> &progress)
{
    return diffIndex(checkpoint, nullptr, layout, options, progress);
}

Result<DiffResult> diffAgainstLayout(const std::shared_ptr<const CheckpointIndex> &checkpoint,
                                     const Layout &layout, const DiffOptions &options,
                                     const std::function<bool(uint64_t, uint64_t)> &progress)
{
    return diffIndex(*checkpoint, checkpoint, layout, options, progress);
}

} // namespace shardscope
