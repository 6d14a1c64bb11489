// SPDX-License-Identifier: MIT
// The model in Megatron's terms, whichever config it came from: what layoutgen.cpp builds a
// layout from. hfconfig.cpp reads it from a Hugging Face config.json (per model family),
// megatronargs.cpp from Megatron's arguments, builder.cpp turns it into parameters.
#pragma once

#include "shardscope/layout.h"
#include "shardscope/result.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace shardscope::detail {

// The model, in Megatron's terms, whichever config it came from.
struct ModelSpec
{
    std::string family;
    int64_t hidden = 0, layers = 0, heads = 0, groups = 0, headDim = 0, ffn = 0, vocab = 0;
    bool tied = false, gated = true, qkvBias = false, qkNorm = false;
    /** Built with Transformer Engine's modules (Megatron's default --transformer-impl; what
     *  Megatron-Bridge builds from a Hugging Face config). */
    bool transformerEngine = true;
    // Megatron's defaults where its arguments are silent (add_bias_linear, LayerNorm, learned
    // absolute positions); a Hugging Face config says what it has.
    bool linearBias = false, normBias = false;
    int64_t positions = 0;          ///< rows of learned absolute position embeddings; 0: none
    bool sequentialExperts = false; ///< moe_grouped_gemm off: SequentialMLP's local_experts
    bool mlaFusion = true;          ///< fused linear_qkv_down_proj (mla_down_proj_fusion)
    // MLA
    bool mla = false;
    int64_t qLora = 0, kvLora = 0, qkNope = 0, qkRope = 0, vHead = 0;
    // MoE
    int64_t experts = 0, moeFfn = 0, sharedFfn = 0;
    bool sharedGate = false, expertBias = false;
    std::vector<bool> moeLayer; // per layer
    // MTP
    int64_t mtpLayers = 0;
    // Qwen3-Next: gated delta net layers and gated attention
    std::vector<bool> gdnLayer;
    bool attentionGate = false;
    /** Why megatron-core's torch_dist asks for the decoder layers one key per layer
     *  (non_homogeneous_layers); empty: a homogeneous block, its layers stacked. */
    std::string perLayerKeys;
    int64_t linKeyHeads = 0, linKeyDim = 0, linValueHeads = 0, linValueDim = 0, convKernel = 4;
};

// A config's numbers are read saturated at ±2^30, so that no product of two of them overflows
// before checkSize() turns a value beyond the model bounds into an error.
constexpr int64_t kSaturate = int64_t(1) << 30;
// A config.json or a Megatron argument file is kilobytes.
constexpr uint64_t kMaxConfigBytes = uint64_t(64) << 20;

/** A config's number at `key`, saturated at ±kSaturate (bools, Megatron's `--flag value`
 *  strings); `fallback` when absent, null or not a number. */
template<typename T>
T num(const nlohmann::json &j, const char *key, T fallback)
{
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return fallback;
    auto saturated = [](long double v) {
        return T(std::clamp<long double>(v, -kSaturate, kSaturate));
    };
    if (it->is_boolean())
        return T(it->get<bool>());
    if (it->is_number_float()) {
        const double d = it->get<double>();
        return std::isfinite(d) ? saturated(d) : fallback;
    }
    if (it->is_number_unsigned())
        return saturated(static_cast<long double>(it->get<uint64_t>()));
    if (it->is_number())
        return saturated(static_cast<long double>(it->get<int64_t>()));
    if (it->is_string()) { // Megatron `--flag value` text
        const std::string s = it->get<std::string>();
        if (s == "true" || s == "True")
            return T(1);
        if (s == "false" || s == "False")
            return T(0);
        try {
            return saturated(static_cast<long double>(std::stoll(s)));
        } catch (...) {
            return fallback;
        }
    }
    return fallback;
}

/** A config's string at `key`; `fallback` when absent or not a string. */
std::string text(const nlohmann::json &j, const char *key, std::string fallback);

/** What a model of any size has: beyond these bounds a config lies. */
Status checkSize(const ModelSpec &m, const std::string &origin);

/** A Hugging Face config.json's model (hfconfig.cpp). */
Result<ModelSpec> fromHuggingFace(const nlohmann::json &c, const std::string &origin);

/** Appends `m`'s parameters to `l` as Megatron names and fuses them (builder.cpp);
 *  `released016`: Megatron-Core 0.16 or older (no fused MLA down projection or query norm). */
void buildParameters(const ModelSpec &m, const LayoutOptions &o, Layout &l, bool released016);

} // namespace shardscope::detail
