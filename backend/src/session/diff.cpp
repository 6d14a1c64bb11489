// SPDX-License-Identifier: MIT
// diff, diff --against and report: open both sides, diff, render.
#include "shardscope/session.h"

namespace shardscope {

namespace {

Error cancelled()
{
    return makeError(Error::Code::Cancelled, "cancelled");
}

Result<OpenedIndex> openOrReuse(const OpenedIndex &opened, const std::string &path)
{
    if (opened)
        return opened;
    auto index = openCheckpoint(path);
    if (!index)
        return index.error();
    return OpenedIndex(std::make_shared<const CheckpointIndex>(std::move(index).value()));
}

} // namespace

Result<DiffResult> runDiff(const DiffRequest &request, const JobControl &control)
{
    if (!control.report({"open", 0, 0}))
        return cancelled();
    auto checkpoint = openOrReuse(request.opened, request.checkpoint);
    if (!checkpoint)
        return checkpoint.error();
    if (!control.report({"layout", 0, 0}))
        return cancelled();
    auto layout = readLayout(request.layout);
    if (!layout)
        return layout.error();
    bool stopped = false;
    auto diff = diffAgainstLayout(**checkpoint, *layout, request.options,
                                  [&](uint64_t done, uint64_t total) {
                                      stopped = stopped || !control.report({"diff", done, total});
                                      return !stopped;
                                  });
    if (stopped)
        return cancelled();
    if (!diff)
        return diff.error();
    diff->against = request.layout;
    return diff;
}

Result<CheckpointDiff> runCheckpointDiff(const CheckpointDiffRequest &request,
                                         const JobControl &control)
{
    if (!control.report({"open", 0, 2}))
        return cancelled();
    auto first = openOrReuse(request.firstOpened, request.first);
    if (!first)
        return first.error();
    if (!control.report({"open", 1, 2}))
        return cancelled();
    auto second = openOrReuse(request.secondOpened, request.second);
    if (!second)
        return second.error();
    if (!control.report({"diff", 0, 0}))
        return cancelled();
    return diffCheckpoints(**first, **second, request.options);
}

Result<ReportOutput> runReport(const ReportRequest &request, const JobControl &control)
{
    if (request.diff.has_value() == request.against.has_value())
        return makeError(Error::Code::Unsupported,
                         "a report is of a diff against a layout or against a checkpoint");
    ReportOutput out;
    if (request.diff) {
        auto diff = runDiff(*request.diff, control);
        if (!diff)
            return diff.error();
        out.text = renderReport(*diff, request.format, request.context);
        out.clean = diff->clean();
    } else {
        auto diff = runCheckpointDiff(*request.against, control);
        if (!diff)
            return diff.error();
        out.text = renderCheckpointDiffReport(*diff, request.format, request.context);
        out.clean = diff->clean();
    }
    control.report({"report", 1, 1});
    return out;
}

} // namespace shardscope
