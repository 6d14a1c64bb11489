// SPDX-License-Identifier: MIT
// Layout JSON (schema shardscope.layout/1), see docs/layout-format.md.
#include "shardscope/layout.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace shardscope {

using nlohmann::json;

namespace {

constexpr const char *kSchema = "shardscope.layout/1";

Error layoutError(const std::string &origin, const std::string &key, const std::string &msg)
{
    Error e = makeError(Error::Code::Format, msg).inFile(origin);
    if (!key.empty())
        e.atKey(key);
    return e;
}

} // namespace

std::string layoutToJson(const Layout &l)
{
    json j;
    j["schema"] = kSchema;
    j["family"] = l.family;
    j["source"] = l.source;
    j["parallel"] = {{"tp", l.parallel.tp},
                     {"pp", l.parallel.pp},
                     {"ep", l.parallel.ep},
                     {"etp", l.parallel.etp},
                     {"dp_shard", l.parallel.dpShard}};
    if (l.parallel.firstStageLayers)
        j["parallel"]["first_stage_layers"] = l.parallel.firstStageLayers;
    if (l.parallel.lastStageLayers)
        j["parallel"]["last_stage_layers"] = l.parallel.lastStageLayers;
    j["parallel"]["layer_names"] = l.ppLayerNames;
    j["num_experts"] = l.numExperts;
    j["experts_global"] = l.expertsGlobal;
    j["transformer_engine"] = l.transformerEngine;
    j["linear_extra_state"] = l.linearExtraState;
    j["mtp_inner"] = l.mtpInner;
    j["optimizer"] = {{"states", l.optimizerStates}, {"step", l.optimizerStep}};
    json params = json::array();
    for (const LayoutParam &p : l.params) {
        json q = {{"name", p.name}, {"shape", p.shape}, {"dtype", p.dtype}, {"tp_dim", p.tpDim}};
        if (p.fusion) {
            json s = json::array();
            for (const FusedSection &sec : p.fusion->sections)
                s.push_back({{"name", sec.name}, {"size", sec.size}});
            q["fusion"] = {{"rule", p.fusion->rule},
                           {"dim", p.fusion->dim},
                           {"tp_interleaved", p.fusion->tpInterleaved},
                           {"tp_local", p.fusion->tpLocal},
                           {"sections", std::move(s)}};
        }
        if (!p.absorbs.empty())
            q["absorbs"] = p.absorbs;
        if (p.expert >= 0)
            q["expert"] = p.expert;
        if (!p.hasOptimizerState)
            q["optimizer_state"] = false;
        params.push_back(std::move(q));
    }
    j["params"] = std::move(params);
    return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

namespace {

// A layout holds integers only, and none near int64's range: nlohmann's conversions cast a
// float (1e300) to an integer, which is undefined, and sums and products of sizes must not
// overflow. One pass over the tree (iterative: the nesting depth is the file's).
Status checkNumbers(const nlohmann::json &root, const std::string &origin)
{
    constexpr int64_t kMax = int64_t(1) << 40;
    std::vector<std::pair<const nlohmann::json *, std::string_view>> todo{{&root, {}}};
    while (!todo.empty()) {
        auto [j, key] = todo.back();
        todo.pop_back();
        if (j->is_object()) {
            for (auto it = j->begin(); it != j->end(); ++it)
                todo.emplace_back(&*it, it.key());
        } else if (j->is_array()) {
            for (const nlohmann::json &e : *j)
                todo.emplace_back(&e, key);
        } else if (j->is_number_float()) {
            return layoutError(origin, std::string(key),
                               j->dump() + " where a layout has integers");
        } else if ((j->is_number_unsigned() && j->get<uint64_t>() > uint64_t(kMax)) ||
                   (j->is_number_integer() && !j->is_number_unsigned() &&
                    (j->get<int64_t>() > kMax || j->get<int64_t>() < -kMax))) {
            return layoutError(origin, std::string(key),
                               j->dump() + " is beyond any model's size (2^40)");
        }
    }
    return Ok{};
}

} // namespace

Result<Layout> layoutFromJson(const std::string &text, const std::string &origin)
{
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error &e) {
        return makeError(Error::Code::Format, "not JSON: " + std::string(e.what()))
            .inFile(origin)
            .atOffset(e.byte > 0 ? e.byte - 1 : 0);
    } catch (const json::exception &e) { // a number beyond double's range (out_of_range 406)
        return makeError(Error::Code::Format, "not a layout: " + std::string(e.what()))
            .inFile(origin);
    }
    if (!j.is_object())
        return layoutError(origin, {}, "not a JSON object");
    if (Status st = checkNumbers(j, origin); !st)
        return st.error();
    if (j.value("schema", std::string()) != kSchema)
        return layoutError(origin, "schema", std::string("expected schema ") + kSchema);
    Layout l;
    try {
        l.family = j.value("family", std::string());
        l.source = j.value("source", std::string());
        if (j.contains("parallel")) {
            const json &p = j["parallel"];
            l.parallel.tp = p.value("tp", 1);
            l.parallel.pp = p.value("pp", 1);
            l.parallel.ep = p.value("ep", 1);
            l.parallel.etp = p.value("etp", 1);
            l.parallel.dpShard = p.value("dp_shard", 1);
            l.parallel.firstStageLayers = p.value("first_stage_layers", 0);
            l.parallel.lastStageLayers = p.value("last_stage_layers", 0);
            if (l.parallel.firstStageLayers < 0 || l.parallel.lastStageLayers < 0)
                return layoutError(origin, "parallel", "stage layer counts cannot be negative");
            if (p.contains("layer_names")) {
                const json &names = p["layer_names"];
                if (!names.is_object())
                    return layoutError(origin, "parallel.layer_names",
                                       "an object of format: \"global\" or \"stage_local\"");
                for (auto it = names.begin(); it != names.end(); ++it) {
                    if (!it->is_string() || (*it != "global" && *it != "stage_local"))
                        return layoutError(origin, "parallel.layer_names." + it.key(),
                                           "must be \"global\" or \"stage_local\"");
                    l.ppLayerNames[it.key()] = it->get<std::string>();
                }
            }
        }
        for (int v :
             {l.parallel.tp, l.parallel.pp, l.parallel.ep, l.parallel.etp, l.parallel.dpShard})
            if (v < 1)
                return layoutError(origin, "parallel", "parallel sizes must be at least 1");
        l.numExperts = j.value("num_experts", 0);
        l.expertsGlobal = j.value("experts_global", true);
        if (j.contains("transformer_engine") && !j["transformer_engine"].is_boolean())
            return layoutError(origin, "transformer_engine", "must be true or false");
        l.transformerEngine = j.value("transformer_engine", false);
        if (j.contains("linear_extra_state") && !j["linear_extra_state"].is_boolean())
            return layoutError(origin, "linear_extra_state", "must be true or false");
        l.linearExtraState = j.value("linear_extra_state", l.transformerEngine);
        l.mtpInner = j.value("mtp_inner", std::string("mtp_model_layer"));
        if (j.contains("optimizer")) {
            l.optimizerStates =
                j["optimizer"].value("states", std::vector<std::string>{"exp_avg", "exp_avg_sq"});
            l.optimizerStep = j["optimizer"].value("step", true);
        }
        if (!j.contains("params") || !j["params"].is_array())
            return layoutError(origin, "params", "no params array");
        size_t i = 0;
        for (const json &q : j["params"]) {
            const std::string where = "params[" + std::to_string(i++) + "]";
            if (!q.is_object() || !q.contains("name") || !q.contains("shape"))
                return layoutError(origin, where, "a param needs name and shape");
            LayoutParam p;
            p.name = q["name"].get<std::string>();
            p.shape = q["shape"].get<std::vector<int64_t>>();
            for (int64_t d : p.shape)
                if (d < 0)
                    return layoutError(origin, p.name, "negative dimension");
            p.dtype = q.value("dtype", std::string("float32"));
            p.tpDim = q.value("tp_dim", -1);
            p.absorbs = q.value("absorbs", std::string());
            p.expert = q.value("expert", -1);
            p.hasOptimizerState = q.value("optimizer_state", true);
            if (q.contains("fusion")) {
                const json &f = q["fusion"];
                Fusion fu;
                fu.rule = f.value("rule", std::string());
                fu.dim = f.value("dim", 0);
                fu.tpInterleaved = f.value("tp_interleaved", false);
                fu.tpLocal = f.value("tp_local", false);
                int64_t total = 0;
                for (const json &s : f.value("sections", json::array())) {
                    FusedSection sec{s.value("name", std::string()), s.value("size", int64_t(0))};
                    if (sec.name.empty() || sec.size <= 0)
                        return layoutError(origin, p.name, "fusion section without name or size");
                    if (__builtin_add_overflow(total, sec.size, &total))
                        return layoutError(origin, p.name, "fusion sections overflow");
                    fu.sections.push_back(std::move(sec));
                }
                if (fu.sections.size() < 2 || fu.dim < 0 || size_t(fu.dim) >= p.shape.size())
                    return layoutError(origin, p.name, "fusion needs 2+ sections and a valid dim");
                const int64_t have = p.shape[size_t(fu.dim)];
                const int64_t tp = fu.tpLocal ? l.parallel.tp : 1;
                int64_t global = 0;
                if (__builtin_mul_overflow(have, tp, &global))
                    return layoutError(origin, p.name, "the fused dimension overflows");
                if (total != global && !(fu.tpLocal && total == have))
                    return layoutError(origin, p.name,
                                       "fusion sections sum to " + std::to_string(total) +
                                           ", the shape has " + std::to_string(have));
                p.fusion = std::move(fu);
            }
            l.params.push_back(std::move(p));
        }
    } catch (const json::exception &e) {
        return layoutError(origin, {}, std::string("bad field: ") + e.what());
    }
    return l;
}

Result<Layout> readLayout(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return makeError(Error::Code::Io, "cannot open layout").inFile(path);
    std::ostringstream s;
    s << in.rdbuf();
    return layoutFromJson(s.str(), path);
}

} // namespace shardscope
