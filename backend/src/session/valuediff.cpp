// SPDX-License-Identifier: MIT
// diff --against --values: open both sides, name their tensors through one layout, compare.
#include "compare/compare.h"
#include "session/opened.h"
#include "shardscope/session.h"

#include <unistd.h>

namespace shardscope {

Result<ValueDiffResult> runValueDiff(const ValueDiffRequest &request, const JobControl &control)
{
    auto cancelled = [] { return makeError(Error::Code::Cancelled, "cancelled"); };
    if (!control.report({"open", 0, 2}))
        return cancelled();
    auto first = detail::openOrReuse(request.firstOpened, request.first);
    if (!first)
        return first.error();
    if (!control.report({"open", 1, 2}))
        return cancelled();
    auto second = detail::openOrReuse(request.secondOpened, request.second);
    if (!second)
        return second.error();
    if (!control.report({"layout", 0, 0}))
        return cancelled();
    auto pivot = request.openedLayout
                     ? Result<detail::Pivot>(detail::Pivot{*request.openedLayout, request.layout})
                     : detail::pivotLayout(**first, **second, request.layout);
    if (!pivot)
        return pivot.error();
    DiffOptions options;
    options.disabledRules = request.disabledRules;
    const bool optimizer = request.includeOptimizer;
    if (!control.report({"pair", 0, 0}))
        return cancelled();
    auto pairs = detail::pairTensors(**first, **second, pivot->layout, options, optimizer);
    if (!pairs)
        return pairs.error();
    detail::CompareOptions o;
    o.rtol = request.rtol;
    o.atol = request.atol;
    o.maxMemory = request.maxMemory
                      ? request.maxMemory
                      : uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE)) / 4;
    o.threads = request.threads;
    o.useGpu = request.useGpu;
    o.comm = request.comm;
    o.progress = [&control](uint64_t done, uint64_t total) {
        return control.report({"compare", done, total});
    };
    auto result = detail::compareValues(**first, **second, *pairs, o);
    if (!result)
        return result.error();
    result->layout = pivot->source;
    result->allowNotCompared = request.allowNotCompared;
    return result;
}

} // namespace shardscope
