// SPDX-License-Identifier: MIT
// The layout both sides of a value comparison are read through: given, generated from a side's
// saved Megatron arguments or Hugging Face config, or made from the first checkpoint's tensors.
#include "compare/compare.h"
#include "diff/loadoutcome.h"

#include <filesystem>
#include <map>
#include <regex>
#include <set>

namespace shardscope::detail {

namespace {

bool stacked(const CheckpointIndex &c)
{
    return c.format == Format::MegatronTorchDist || c.format == Format::MegatronLegacy;
}

// The model's name of a stored model tensor: fsdp_dtensor's `model.module.` wrapper stripped,
// other formats' keys as stored; nullopt for optimizer state and what is not the model's.
std::optional<std::string> modelName(const CheckpointIndex &c, const std::string &key)
{
    if (key.starts_with("optimizer.") || key.find("._extra_state") != std::string::npos ||
        key.starts_with("rng_state"))
        return std::nullopt;
    if (fsdpDtensorLoad(c)) {
        static const std::regex wrapper(R"(^model\d*\.(module\.)+)");
        std::smatch m;
        if (!std::regex_search(key, m, wrapper))
            return std::nullopt;
        return key.substr(size_t(m.length(0)));
    }
    return key;
}

// MTP's inner layer by its live name (mtp_model_layer), whichever spelling a side stored: the
// rules map it to each side's own.
void liveMtpName(std::string &name)
{
    if (const size_t at = name.find(".transformer_layer.");
        name.starts_with("mtp.layers.") && at != std::string::npos)
        name.replace(at, 19, ".mtp_model_layer.");
}

// A fused parameter's sections as one side keeps them apart (Megatron's handlers' names, §6).
struct Parts
{
    const char *rule;
    std::vector<std::string> names;
    bool absorbed = false; ///< a norm moved, not split
};
std::optional<Parts> partsOf(const std::string &fused)
{
    if (fused.ends_with(".linear_fc1.weight") || fused.ends_with(".linear_fc1.bias"))
        return Parts{"swiglu", {fused + "_w", fused + "_v"}};
    static const std::regex grouped(R"(\.linear_fc1\.(weight|bias)\d+$)");
    if (std::regex_search(fused, grouped))
        return Parts{"swiglu", {fused + "_w", fused + "_v"}};
    const std::string down = ".linear_qkv_down_proj.weight";
    if (fused.ends_with(down)) {
        const std::string base = fused.substr(0, fused.size() - down.size());
        return Parts{"mla_down_proj",
                     {base + ".linear_q_down_proj.weight", base + ".linear_kv_down_proj.weight"}};
    }
    static const std::regex norm(
        R"(^(.*\.)self_attention\.linear_qkv_down_proj\.layer_norm_(weight|bias)$)");
    std::smatch m;
    if (std::regex_match(fused, m, norm))
        return Parts{"mla_down_proj", {m[1].str() + "input_layernorm." + m[2].str()}, true};
    if (fused.ends_with(".in_proj.weight"))
        return Parts{"gdn",
                     {fused + ".query", fused + ".key", fused + ".value", fused + ".z",
                      fused + ".beta", fused + ".alpha"}};
    if (fused.ends_with(".conv1d.weight"))
        return Parts{"gdn", {fused + ".query", fused + ".key", fused + ".value"}};
    return std::nullopt;
}

// The first checkpoint's model tensors as a layout; a tensor the other side keeps apart (or
// fused where this one keeps it apart) becomes the fused parameter with its sections, so that
// the diff reads each side through the same rule.
Layout ownLayout(const CheckpointIndex &a, const CheckpointIndex &b)
{
    struct Named
    {
        std::string name;
        const TensorEntry *t;
    };
    auto named = [](const CheckpointIndex &c) {
        std::vector<Named> out;
        for (const TensorEntry &t : c.tensors)
            if (auto n = modelName(c, t.key.str())) {
                liveMtpName(*n);
                out.push_back({*n, &t});
            }
        return out;
    };
    const std::vector<Named> inA = named(a), inB = named(b);
    std::map<std::string, const TensorEntry *> byA, byB;
    for (const Named &n : inA)
        byA.emplace(n.name, n.t);
    for (const Named &n : inB)
        byB.emplace(n.name, n.t);
    // The parameters the first checkpoint keeps optimizer state for (not its buffers).
    std::set<std::string> withState;
    for (const TensorEntry &t : a.tensors) {
        if (!t.key.starts_with("optimizer.state."))
            continue;
        std::string_view rest = std::string_view(t.key).substr(16);
        while (rest.starts_with("module."))
            rest = rest.substr(7);
        if (const size_t dot = rest.rfind('.'); dot != std::string_view::npos) {
            std::string n(rest.substr(0, dot));
            liveMtpName(n);
            withState.insert(std::move(n));
        }
    }
    const bool optimizer = !withState.empty();

    Layout l;
    l.family = "checkpoint";
    l.source = a.inputPath;
    std::map<std::string, bool> taken; // A's names folded into a fused parameter
    auto param = [&](const std::string &name, const TensorEntry &t) {
        LayoutParam p;
        p.name = name;
        p.shape = t.shape.toVector();
        p.dtype = t.dtypeName;
        p.hasOptimizerState = withState.count(name) > 0;
        return p;
    };
    // The fused parameter `name` whose parts `from` holds, sized by them; nullopt otherwise.
    auto fused = [&](const std::string &name, const std::vector<int64_t> &shape,
                     const std::map<std::string, const TensorEntry *> &from,
                     const std::string &dtype) -> std::optional<LayoutParam> {
        auto parts = partsOf(name);
        if (!parts)
            return std::nullopt;
        LayoutParam p;
        p.name = name;
        p.shape = shape;
        p.dtype = dtype;
        p.hasOptimizerState = withState.count(name) > 0;
        for (const std::string &n : parts->names)
            p.hasOptimizerState = p.hasOptimizerState || withState.count(n) > 0;
        if (parts->absorbed) {
            if (!from.count(parts->names.front()))
                return std::nullopt;
            p.absorbs = parts->names.front();
            return p;
        }
        Fusion f;
        f.rule = parts->rule;
        int64_t rows = 0;
        for (const std::string &n : parts->names) {
            auto it = from.find(n);
            if (it == from.end() || it->second->shape.empty())
                return std::nullopt;
            f.sections.push_back({n, it->second->shape[0]});
            rows += it->second->shape[0];
        }
        if (shape.empty() || rows != shape[0])
            return std::nullopt;
        p.fusion = std::move(f);
        return p;
    };
    // Fused in B, apart in A: the fused parameter replaces A's parts.
    std::map<std::string, LayoutParam> fusedAt; // first part's name → the fused parameter
    for (const Named &n : inB) {
        if (byA.count(n.name))
            continue;
        if (auto p = fused(n.name, n.t->shape.toVector(), byA, n.t->dtypeName)) {
            const std::string first = p->fusion ? p->fusion->sections.front().name : p->absorbs;
            for (const auto &s : p->fusion ? p->fusion->sections : std::vector<FusedSection>{})
                taken[s.name] = true;
            if (!p->absorbs.empty())
                taken[p->absorbs] = true;
            fusedAt.emplace(first, std::move(*p));
        }
    }
    for (const Named &n : inA) {
        if (auto it = fusedAt.find(n.name); it != fusedAt.end()) {
            l.params.push_back(it->second);
            continue;
        }
        if (taken.count(n.name))
            continue;
        // Fused in A, apart in B: A's parameter gets the sections B keeps.
        if (!byB.count(n.name))
            if (auto p = fused(n.name, n.t->shape.toVector(), byB, n.t->dtypeName)) {
                l.params.push_back(std::move(*p));
                continue;
            }
        l.params.push_back(param(n.name, *n.t));
    }
    if (!optimizer) {
        l.optimizerStates.clear();
        l.optimizerStep = false;
    }
    return l;
}

// A layout from a side's own description: its saved Megatron arguments, or its config.json.
std::optional<Pivot> describedBy(const CheckpointIndex &c)
{
    LayoutOptions o;
    if (c.format != Format::Safetensors && c.format != Format::SafetensorsIndex &&
        c.format != Format::TorchSave && c.format != Format::TorchSaveIndex)
        if (auto l = layoutFromConfig(c.inputPath, o))
            return Pivot{std::move(*l), c.inputPath + " (its saved Megatron arguments)"};
    const std::string config = configBeside(c);
    std::error_code ec;
    if (std::filesystem::exists(config, ec))
        if (auto l = layoutFromConfig(config, o))
            return Pivot{std::move(*l), config};
    return std::nullopt;
}

} // namespace

std::string configBeside(const CheckpointIndex &c)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = fs::is_directory(c.inputPath, ec) ? fs::path(c.inputPath)
                                                           : fs::path(c.inputPath).parent_path();
    return (dir / "config.json").string();
}

Result<Pivot> pivotLayout(const CheckpointIndex &a, const CheckpointIndex &b,
                          const std::string &layoutPath)
{
    Pivot p;
    if (!layoutPath.empty()) {
        auto l = readLayout(layoutPath);
        if (!l)
            return l.error();
        p = {std::move(*l), layoutPath};
    } else if (hfLlamaOf(a).has_value() != hfLlamaOf(b).has_value()) {
        // Hugging Face against Megatron: the Megatron side's arguments, or the HF config.
        const CheckpointIndex &megatron = hfLlamaOf(a) ? b : a, &hf = hfLlamaOf(a) ? a : b;
        auto d = describedBy(megatron);
        if (!d)
            d = describedBy(hf);
        if (!d)
            return makeError(Error::Code::NotFound,
                             "no layout names both sides: pass --layout, or keep the Hugging "
                             "Face config.json beside its safetensors")
                .inFile(hf.inputPath);
        p = std::move(*d);
    } else if (stacked(a) || stacked(b)) {
        // A legacy side's own sizes first: its rank files are cut by them.
        const bool legacyB =
            b.format == Format::MegatronLegacy && a.format != Format::MegatronLegacy;
        const CheckpointIndex &c = legacyB || !stacked(a) ? b : a;
        auto d = describedBy(c);
        if (!d)
            return makeError(Error::Code::NotFound,
                             "its tensors are stacked or cut per rank and it has no saved "
                             "arguments to generate a layout from: pass --layout")
                .inFile(c.inputPath);
        p = std::move(*d);
    } else {
        p = {ownLayout(a, b), a.inputPath + " (its own tensors)"};
    }
    // Values, not a resumed run: every layer under its global name, whole.
    p.layout.parallel.pp = 1;
    p.layout.parallel.firstStageLayers = -1;
    p.layout.parallel.lastStageLayers = -1;
    return p;
}

} // namespace shardscope::detail
