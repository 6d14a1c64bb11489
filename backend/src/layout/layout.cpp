// SPDX-License-Identifier: MIT
// Layout JSON (schema shardscope.layout/1), see docs/layout-format.md.
#include "shardscope/layout.h"

#include "common/regularfile.h"
#include "layout/layoutreader.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>

namespace shardscope {

using nlohmann::json;

namespace {

constexpr const char *kSchema = "shardscope.layout/1";
// DeepSeek-V3's layout is some 10 MB; a hundred times that is no layout.
constexpr uint64_t kMaxLayoutBytes = uint64_t(1) << 30;

Error layoutError(const std::string &origin, const std::string &key, const std::string &msg)
{
    Error e = makeError(Error::Code::Format, msg).inFile(origin);
    if (!key.empty())
        e.atKey(key);
    return e;
}

// A fused parameter's sections: named, positive, and summing to the fused dimension (the
// global one, or the TP-local one for a TP-local shape).
Status checkFusion(const LayoutParam &p, int tp, const std::string &origin)
{
    const Fusion &fu = *p.fusion;
    int64_t total = 0;
    for (const FusedSection &sec : fu.sections) {
        if (sec.name.empty() || sec.size <= 0)
            return layoutError(origin, p.name, "fusion section without name or size");
        if (__builtin_add_overflow(total, sec.size, &total))
            return layoutError(origin, p.name, "fusion sections overflow");
    }
    if (fu.sections.size() < 2 || fu.dim < 0 || size_t(fu.dim) >= p.shape.size())
        return layoutError(origin, p.name, "fusion needs 2+ sections and a valid dim");
    const int64_t have = p.shape[size_t(fu.dim)];
    int64_t global = 0;
    if (__builtin_mul_overflow(have, fu.tpLocal ? int64_t(tp) : int64_t(1), &global))
        return layoutError(origin, p.name, "the fused dimension overflows");
    if (total != global && !(fu.tpLocal && total == have))
        return layoutError(origin, p.name,
                           "fusion sections sum to " + std::to_string(total) + ", the shape has " +
                               std::to_string(have));
    return Ok{};
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
    if (!l.ties.empty())
        j["ties"] = l.ties;
    if (l.torchDistLayers != Layout::LayerKeys::Unknown) {
        j["torch_dist"] = {
            {"layers", l.torchDistLayers == Layout::LayerKeys::PerLayer ? "per_layer" : "stacked"}};
        if (!l.torchDistLayersWhy.empty())
            j["torch_dist"]["why"] = l.torchDistLayersWhy;
    }
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

Result<Layout> layoutFromJson(const std::string &text, const std::string &origin)
{
    auto scanned = detail::scanLayoutJson(text, origin);
    if (!scanned)
        return scanned.error();
    const json &j = scanned->top;
    if (const auto it = j.find("schema"); it == j.end() || *it != kSchema)
        return layoutError(origin, "schema", std::string("expected schema ") + kSchema);
    Layout l;
    try {
        l.family = j.value("family", std::string());
        l.source = j.value("source", std::string());
        if (j.contains("parallel")) {
            const json &p = j["parallel"];
            // Sizes are ints: a larger integer would wrap around, not fail.
            for (const char *k :
                 {"tp", "pp", "ep", "etp", "dp_shard", "first_stage_layers", "last_stage_layers"})
                if (const auto v = p.find(k);
                    v != p.end() && v->is_number_integer() && std::abs(v->get<int64_t>()) > INT_MAX)
                    return layoutError(origin, std::string("parallel.") + k, "out of range");
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
        if (const auto ties = j.find("ties"); ties != j.end()) {
            if (!ties->is_array())
                return layoutError(origin, "ties", "an array of arrays of names");
            for (size_t i = 0; i < ties->size(); ++i) {
                const json &g = (*ties)[i];
                const std::string where = "ties[" + std::to_string(i) + "]";
                if (!g.is_array() || g.size() < 2)
                    return layoutError(origin, where, "a tie names two or more parameters");
                std::vector<std::string> names;
                for (const json &n : g) {
                    if (!n.is_string())
                        return layoutError(origin, where, "names are strings");
                    names.push_back(n.get<std::string>());
                }
                l.ties.push_back(std::move(names));
            }
        }
        if (const auto td = j.find("torch_dist"); td != j.end()) {
            if (!td->is_object())
                return layoutError(origin, "torch_dist", "must be an object");
            if (const auto layers = td->find("layers"); layers != td->end()) {
                if (!layers->is_string() || (*layers != "stacked" && *layers != "per_layer"))
                    return layoutError(origin, "torch_dist.layers",
                                       "must be \"stacked\" or \"per_layer\"");
                l.torchDistLayers = *layers == "per_layer" ? Layout::LayerKeys::PerLayer
                                                           : Layout::LayerKeys::Stacked;
            }
            if (const auto why = td->find("why"); why != td->end() && why->is_string())
                l.torchDistLayersWhy = why->get<std::string>();
        }
        if (j.contains("optimizer")) {
            l.optimizerStates =
                j["optimizer"].value("states", std::vector<std::string>{"exp_avg", "exp_avg_sq"});
            l.optimizerStep = j["optimizer"].value("step", true);
        }
    } catch (const json::exception &e) {
        return layoutError(origin, {}, std::string("bad field: ") + e.what());
    }
    if (!scanned->hasParams)
        return layoutError(origin, "params", "no params array");
    l.params.reserve(scanned->params.size());
    for (size_t i = 0; i < scanned->params.size(); ++i) {
        detail::ScannedParam &s = scanned->params[i];
        if (!s.hasName || !s.hasShape)
            return layoutError(origin, "params[" + std::to_string(i) + "]",
                               "a param needs name and shape");
        LayoutParam &p = s.param;
        for (int64_t d : p.shape)
            if (d < 0)
                return layoutError(origin, p.name, "negative dimension");
        if (p.fusion)
            if (Status st = checkFusion(p, l.parallel.tp, origin); !st)
                return st.error();
        l.params.push_back(std::move(p));
    }
    return l;
}

Result<Layout> readLayout(const std::string &path)
{
    // One read into a string of the file's size (a layout is some 10 MB at DeepSeek-V3 scale).
    auto text = detail::readRegularFile(path, kMaxLayoutBytes);
    if (!text)
        return text.error();
    return layoutFromJson(*text, path);
}

} // namespace shardscope
