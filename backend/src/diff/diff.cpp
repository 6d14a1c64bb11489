// SPDX-License-Identifier: MIT
// The load diff: what a model expects (a Layout) against what a checkpoint holds. This file
// runs the stages in order; differ.h says where each lives.
#include "diff/differ.h"

#include <algorithm>

namespace shardscope {

namespace detail {

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
    if (!evaluateModel(r, progress, threads))
        return std::nullopt;
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
    if (m_options.includeOptimizer && !m_disk.groupMeta.empty())
        paramGroups(r, threads);
    collectUnconsumed(r);
    noteTiedUnconsumed(r);
    assembleOutcome(r);
    // The options' callback views the caller's checkpoint: not for the result to keep.
    r.options.sameValues = nullptr;
    if (progress)
        progress(2 * m_params.size(), 2 * m_params.size());
    return r;
}

} // namespace detail

Result<DiffResult> diffAgainstLayout(const CheckpointIndex &checkpoint, const Layout &layout,
                                     const DiffOptions &options,
                                     const std::function<bool(uint64_t, uint64_t)> &progress)
{
    for (const std::string &r : options.disabledRules) {
        const auto &rules = allRules();
        if (std::none_of(rules.begin(), rules.end(),
                         [&](const RuleInfo &i) { return i.name == r; }))
            return makeError(Error::Code::NotFound, "unknown rule '" + r + "'");
    }
    std::optional<DiffResult> r = detail::Differ(checkpoint, layout, options).run(progress);
    if (!r)
        return makeError(Error::Code::Cancelled, "cancelled");
    r->against = layout.source;
    return std::move(*r);
}

} // namespace shardscope
