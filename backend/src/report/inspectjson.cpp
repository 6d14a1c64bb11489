// SPDX-License-Identifier: MIT
// shardscope.inspect/1: what `inspect --json` prints and the GUI exports.
#include "report/reportparts.h"
#include "shardscope/session.h"
#include "shardscope/torchcompat.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

namespace shardscope {

namespace {

using nlohmann::json;

json number(double v)
{
    return std::isfinite(v) ? json(v) : json(nullptr);
}

json statsJson(const TensorHealth &h)
{
    // No finite values: no moments (null).
    auto moment = [&](double v) { return h.finite ? number(v) : json(nullptr); };
    json j = {{"count", h.count},        {"finite", h.finite},      {"nan", h.nanCount},
              {"posinf", h.posInfCount}, {"neginf", h.negInfCount}, {"min", moment(h.min)},
              {"max", moment(h.max)},    {"mean", moment(h.mean)},  {"std", moment(h.std)},
              {"l2", number(h.l2)}};
    if (!h.histogram.empty()) { // our kernels' (libtorch's fallback has none)
        j["denormal"] = h.denormalCount;
        j["histogram"] = h.histogram;
        char fp[17];
        std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(h.fingerprint));
        j["fingerprint"] = fp;
    }
    return j;
}

json problemJson(const Problem &p)
{
    json j = {
        {"key", p.key}, {"file", p.file}, {"message", p.message}, {"effect", effectName(p.effect)}};
    j["offset"] = p.offset ? json(*p.offset) : json(nullptr);
    return j;
}

} // namespace

std::string inspectToJson(const InspectResult &result, const std::string &path)
{
    const CheckpointIndex &index = *result.index;
    json j;
    j["schema"] = "shardscope.inspect/1";
    j["path"] = path;
    j["format"] = std::string(formatName(index.format));
    j["data_dir"] = index.dataDir;
    j["info"] = index.info;
    if (const TorchReadability r = torchReadability(index); r.applies)
        j["torch_readable"] = report::torchReadableJson(r);
    json files = json::array();
    for (size_t i = 0; i < index.files.size(); ++i)
        files.push_back({{"path", index.files[i]},
                         {"size", index.fileSizes[i] == UINT64_MAX ? json(nullptr)
                                                                   : json(index.fileSizes[i])}});
    j["files"] = std::move(files);
    json ts = json::array();
    for (const InspectedTensor &r : result.tensors) {
        const TensorEntry &t = *r.entry;
        json chunks = json::array();
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Location &l = t.chunks[c];
            const bool placed = l.file < index.files.size();
            json cj = {
                {"offsets",
                 std::vector<int64_t>(t.chunkOffsets(c).begin(), t.chunkOffsets(c).end())},
                {"sizes", std::vector<int64_t>(t.chunkSizes(c).begin(), t.chunkSizes(c).end())},
                {"file", placed ? json(index.files[l.file]) : json(nullptr)},
                {"offset", l.offset},
                {"length", l.length}};
            if (l.transforms)
                cj["transforms"] = index.transformChains[l.transforms];
            chunks.push_back(std::move(cj));
        }
        json tj = {{"key", t.key},       {"dtype", t.dtypeName}, {"shape", t.shape},
                   {"numel", t.numel()}, {"nbytes", t.nbytes()}, {"chunks", std::move(chunks)}};
        if (!t.path.splitsEveryDot())
            tj["path"] = t.path.parts(t.key);
        if (!r.sha256.empty())
            tj["sha256"] = r.sha256;
        if (r.health)
            tj["stats"] = statsJson(*r.health);
        if (!r.looksInitial.empty())
            tj["looks_initial"] = r.looksInitial;
        ts.push_back(std::move(tj));
    }
    j["tensors"] = std::move(ts);
    json os = json::array();
    for (const InspectedObject &o : result.objects) {
        const ObjectEntry &ob = *o.entry;
        json oj = {{"key", ob.key}};
        if (!ob.path.splitsEveryDot())
            oj["path"] = ob.path.parts(ob.key);
        if (ob.location && ob.location->file < index.files.size()) {
            oj["file"] = index.files[ob.location->file];
            oj["offset"] = ob.location->offset;
            oj["length"] = ob.location->length;
        }
        if (!o.summary.empty())
            oj["value"] = o.summary;
        os.push_back(std::move(oj));
    }
    j["objects"] = std::move(os);
    json ps = json::array();
    for (const Problem &p : result.problems)
        ps.push_back(problemJson(p));
    j["problems"] = std::move(ps);
    j["healthy"] = result.healthy();
    return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

} // namespace shardscope
