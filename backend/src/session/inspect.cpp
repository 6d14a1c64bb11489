// SPDX-License-Identifier: MIT
// inspect: open, select, and read the selected tensors' data for their health and hash.
#include "session/opened.h"
#include "shardscope/session.h"
#include "shardscope/tensor.h"

#include <fnmatch.h>
#include <unordered_set>

namespace shardscope {

namespace {

bool selected(const InspectRequest &r, const CompactString &key)
{
    if (r.tensor)
        return key == *r.tensor;
    if (r.filters.empty())
        return true;
    for (const std::string &f : r.filters)
        if (fnmatch(f.c_str(), key.c_str(), 0) == 0)
            return true;
    return false;
}

Problem unreadable(Error e, std::string key)
{
    e.atKey(std::move(key));
    return {e.key, e.file, e.offset, e.message, Problem::Effect::Unreadable};
}

} // namespace

Result<TensorHealth> tensorHealth(const TensorData &data)
{
    if (auto h = computeHealth(data))
        return h;
    // A dtype our kernels lack (float8 fnuz variants, e8m0): libtorch's moments, no histogram.
    auto s = computeStats(data);
    if (!s)
        return s.error();
    TensorHealth h;
    h.count = s->count;
    h.finite = s->finite;
    h.nanCount = s->nanCount;
    h.posInfCount = s->posInfCount;
    h.negInfCount = s->negInfCount;
    h.min = s->min;
    h.max = s->max;
    h.mean = s->mean;
    h.std = s->std;
    h.l2 = s->l2;
    h.device = "cpu";
    return h;
}

Result<InspectResult> runInspect(const InspectRequest &request, const JobControl &control)
{
    if (!control.report({"open", 0, 0}))
        return makeError(Error::Code::Cancelled, "cancelled");
    // Every item checked when every tensor is read anyway (an index the caller opened too).
    auto opened = detail::openOrReuse(request.opened, request.path, request.hash || request.stats);
    if (!opened)
        return opened.error();
    InspectResult r;
    r.index = std::move(*opened);
    const CheckpointIndex &index = *r.index;
    r.problems = index.problems;

    for (const TensorEntry &t : index.tensors)
        if (selected(request, t.key))
            r.tensors.push_back({&t, std::nullopt, {}});
    if (request.tensor && r.tensors.empty() && !index.findObject(*request.tensor)) {
        Error e = makeError(Error::Code::NotFound, "no such tensor");
        e.file = request.path;
        e.key = *request.tensor;
        return e;
    }
    // A key the open already found unreadable (its data file missing, cut short or not a regular
    // file) is not read again: one problem per key, and nothing opened that must not be.
    std::unordered_set<std::string_view> broken;
    for (const Problem &p : index.problems)
        if (p.effect == Problem::Effect::Unreadable)
            broken.insert(p.key);
    if (request.stats || request.hash) {
        uint64_t total = 0, done = 0;
        for (const InspectedTensor &t : r.tensors)
            total += t.entry->nbytes();
        for (InspectedTensor &t : r.tensors) {
            if (!control.report({"read", done, total}))
                return makeError(Error::Code::Cancelled, "cancelled");
            done += t.entry->nbytes();
            if (broken.count(t.entry->key))
                continue;
            auto data = readTensor(index, *t.entry);
            if (!data) {
                r.problems.push_back(unreadable(data.error(), t.entry->key.str()));
                continue;
            }
            if (request.hash)
                t.sha256 = sha256Hex(*data);
            if (request.stats)
                if (auto h = tensorHealth(*data)) {
                    if (isFloatingPoint(data->dtype))
                        t.looksInitial = initialLikeness(*h, request.initStd);
                    t.health = std::move(*h);
                }
        }
        control.report({"read", total, total});
    }
    for (const ObjectEntry &ob : index.objects) {
        if (!selected(request, ob.key))
            continue;
        InspectedObject o{&ob, {}};
        if ((request.objects || (request.tensor && ob.key == *request.tensor)) &&
            !broken.count(ob.key)) {
            if (auto v = readObject(index, ob))
                o.summary = v->summary(120);
            else
                r.problems.push_back(unreadable(v.error(), ob.key.str()));
        }
        r.objects.push_back(std::move(o));
    }
    return r;
}

} // namespace shardscope
