// SPDX-License-Identifier: MIT
// diff, diff --against and report: open both sides, diff, render.
#include "shardscope/session.h"

#include "session/opened.h"
#include "shardscope/health.h"
#include "shardscope/loadplan.h"

#include <algorithm>
#include <map>

namespace shardscope {

using detail::openOrReuse;

namespace {

Error cancelled()
{
    return makeError(Error::Code::Cancelled, "cancelled");
}

// Reads every stored tensor a load casts to fewer bits and measures the cast, as torch does it.
// Each stored key is read once (a stacked torch_dist key serves several parameters).
bool measureCasts(const CheckpointIndex &index, DiffResult &diff, const JobControl &control)
{
    std::map<std::string, std::optional<CastLoss>> byKey;
    uint64_t total = 0, done = 0;
    for (const DiffEntry &e : diff.entries)
        if (e.narrowing)
            for (const DiffSource &s : e.sources)
                if (const TensorEntry *t = sourceTensor(index, s); t && !byKey.count(s.key)) {
                    byKey[s.key];
                    total += t->nbytes();
                }
    for (DiffEntry &e : diff.entries) {
        if (!e.narrowing)
            continue;
        const auto to = dtypeFromName(e.dtype);
        for (const DiffSource &s : e.sources) {
            auto &slot = byKey[s.key];
            const TensorEntry *t = sourceTensor(index, s);
            if (!slot && t && to) {
                if (!control.report({"casts", done, total}))
                    return false;
                done += t->nbytes();
                if (auto data = readTensor(index, *t))
                    if (auto loss = measureCast(*data, *to))
                        slot = *loss;
            }
            if (!slot)
                continue;
            CastLoss &m = e.castLoss ? *e.castLoss : e.castLoss.emplace();
            if (slot->maxAbs > m.maxAbs || m.worstIndex < 0) {
                m.maxAbs = slot->maxAbs;
                m.worstIndex = slot->worstIndex;
                m.worstValue = slot->worstValue;
            }
            m.maxRel = std::max(m.maxRel, slot->maxRel);
            m.changed += slot->changed;
            m.count += slot->count;
        }
    }
    control.report({"casts", total, total});
    summariseCasts(diff);
    return true;
}

// Reads what the load fills each parameter with (the rows each source gives it, a stacked key's
// slice) and names the parameters whose values all look like a fresh initialization.
bool checkInitLikeness(const CheckpointIndex &index, const Layout &layout, DiffResult &diff,
                       const JobControl &control)
{
    int layers = 0; // the output layers' scaled init std depends on the depth
    for (const LayoutParam &p : layout.params)
        if (const size_t at = p.name.find("decoder.layers."); at != std::string::npos)
            layers = std::max(layers, std::atoi(p.name.c_str() + at + 15) + 1);
    size_t flagged = 0, done = 0;
    const DiffEntry *first = nullptr;
    for (DiffEntry &e : diff.entries) {
        if (!control.report({"init", done++, diff.entries.size()}))
            return false;
        if (e.section != Section::Model || !e.realLoadFills || e.sources.empty())
            continue;
        std::string why;
        for (const DiffSource &s : e.sources) {
            const TensorEntry *t = sourceTensor(index, s);
            const int64_t rows = size_t(s.dim) < e.shape.size() ? e.shape[size_t(s.dim)] : 1;
            const auto read = t ? sourceRead(s, rows, 0, rows) : std::nullopt;
            std::optional<TensorHealth> health;
            if (read)
                if (auto data = readTensor(index, *t, readBox(*read));
                    data && isFloatingPoint(data->dtype))
                    if (auto h = tensorHealth(*data))
                        health = std::move(*h);
            const std::string w =
                health ? initialLikeness(*health, diff.options.initStd, layers) : std::string();
            if (w.empty()) {
                why.clear();
                break;
            }
            if (why.empty())
                why = w;
        }
        e.looksInitial = why;
        if (!why.empty() && !flagged++)
            first = &e;
    }
    control.report({"init", done, diff.entries.size()});
    if (first)
        diff.outcome.warnings.push_back(
            "init: " + std::to_string(flagged) +
            (flagged == 1 ? " parameter loads values" : " parameters load values") +
            " that look like a fresh initialization, not training (first: " + first->name + ": " +
            first->looksInitial + ")");
    return true;
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
    auto read = detail::layoutOrRead(request.openedLayout, request.layout);
    if (!read)
        return read.error();
    const std::shared_ptr<const Layout> layout = *read;
    bool stopped = false;
    auto diff = diffAgainstLayout(*checkpoint, *layout,
                                  detail::withValueComparison(request.options, **checkpoint),
                                  [&](uint64_t done, uint64_t total) {
                                      stopped = stopped || !control.report({"diff", done, total});
                                      return !stopped;
                                  });
    if (stopped)
        return cancelled();
    if (!diff)
        return diff.error();
    diff->against = request.layout;
    if (request.options.measureCasts && !measureCasts(**checkpoint, *diff, control))
        return cancelled();
    if (request.options.previewRepair && !diff->passes()) {
        if (!control.report({"repair", 0, 0}))
            return cancelled();
        detail::previewRepair(**checkpoint, *layout, *diff, request.checkpoint, request.layout,
                              request.layoutCommand);
    }
    if (request.options.checkInit && !checkInitLikeness(**checkpoint, *layout, *diff, control))
        return cancelled();
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
    bool stopped = false;
    auto diff =
        diffCheckpoints(**first, **second, request.options, [&](uint64_t done, uint64_t total) {
            stopped = stopped || !control.report({"diff", done, total});
            return !stopped;
        });
    if (stopped)
        return cancelled();
    return diff;
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
        out.clean = diff->passes();
    } else {
        auto diff = runCheckpointDiff(*request.against, control);
        if (!diff)
            return diff.error();
        std::optional<ValueDiffResult> values;
        if (request.values) {
            auto v = runValueDiff(*request.values, control);
            if (!v)
                return v.error();
            values = std::move(*v);
        }
        out.text = renderCheckpointDiffReport(*diff, request.format, request.context,
                                              values ? &*values : nullptr);
        out.clean = values ? values->passes() : diff->clean();
    }
    control.report({"report", 1, 1});
    return out;
}

} // namespace shardscope
