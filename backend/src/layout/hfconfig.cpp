// SPDX-License-Identifier: MIT
// A Hugging Face config.json → the model in Megatron's terms, per model family (Llama and its
// kin, DeepSeek-V3's MLA and MoE, Qwen3-Next's gated delta net), as Megatron-Bridge maps them.
#include "layout/modelspec.h"

namespace shardscope::detail {

using nlohmann::json;

namespace {

// DeepSeek-V2/V3: multi-latent attention, routed and shared experts after the first dense
// layers, and the multi-token-prediction layers.
Status readDeepSeek(const json &c, const std::string &type, ModelSpec &m, const std::string &origin)
{
    m.mla = true;
    m.qkNorm = true; // Megatron-Bridge's DeepSeek providers set qk_layernorm
    m.qLora = num<int64_t>(c, "q_lora_rank", 0);
    m.kvLora = num<int64_t>(c, "kv_lora_rank", 0);
    m.qkNope = num<int64_t>(c, "qk_nope_head_dim", 0);
    m.qkRope = num<int64_t>(c, "qk_rope_head_dim", 0);
    m.vHead = num<int64_t>(c, "v_head_dim", 0);
    m.experts = num<int64_t>(c, "n_routed_experts", 0);
    m.moeFfn = num<int64_t>(c, "moe_intermediate_size", 0);
    m.sharedFfn = m.moeFfn * num<int64_t>(c, "n_shared_experts", 0);
    m.expertBias = type == "deepseek_v3" || text(c, "topk_method", "") == "noaux_tc";
    const int64_t firstDense = num<int64_t>(c, "first_k_dense_replace", 0);
    const int64_t freq = num<int64_t>(c, "moe_layer_freq", 1);
    for (int64_t i = 0; i < m.layers; ++i)
        m.moeLayer[size_t(i)] = m.experts > 0 && i >= firstDense && freq > 0 && i % freq == 0;
    m.mtpLayers = num<int64_t>(c, "num_nextn_predict_layers", 0);
    if (m.kvLora <= 0 || m.qkRope <= 0 || m.vHead <= 0)
        return makeError(Error::Code::Format, "MLA config lacks kv_lora_rank/qk_rope_head_dim/"
                                              "v_head_dim")
            .inFile(origin);
    return Ok{};
}

// Mixtral, Qwen2-MoE, Qwen3-MoE and Qwen3-Next: experts every decoder_sparse_step-th layer
// except mlp_only_layers, a gated shared expert in the Qwen families that have one.
void readExperts(const json &c, const std::string &type, ModelSpec &m)
{
    m.experts = num<int64_t>(c, "num_experts", num<int64_t>(c, "num_local_experts", 0));
    m.moeFfn = num<int64_t>(c, "moe_intermediate_size", m.ffn);
    m.sharedFfn = num<int64_t>(c, "shared_expert_intermediate_size", 0);
    m.sharedGate = m.sharedFfn > 0 && (type == "qwen3_next" || type == "qwen2_moe");
    const int64_t step = num<int64_t>(c, "decoder_sparse_step", 1);
    std::vector<int64_t> mlpOnly;
    if (c.contains("mlp_only_layers") && c["mlp_only_layers"].is_array())
        for (const json &v : c["mlp_only_layers"])
            if (v.is_number_integer())
                mlpOnly.push_back(v.get<int64_t>());
    for (int64_t i = 0; i < m.layers; ++i)
        m.moeLayer[size_t(i)] = m.experts > 0 && step > 0 && (i + 1) % step == 0 &&
                                std::find(mlpOnly.begin(), mlpOnly.end(), i) == mlpOnly.end();
}

// Qwen3-Next: gated delta net layers between the (gated) full-attention ones.
Status readGatedDeltaNet(const json &c, ModelSpec &m, const std::string &origin)
{
    m.attentionGate = true;
    m.linKeyHeads = num<int64_t>(c, "linear_num_key_heads", 0);
    m.linKeyDim = num<int64_t>(c, "linear_key_head_dim", 0);
    m.linValueHeads = num<int64_t>(c, "linear_num_value_heads", 0);
    m.linValueDim = num<int64_t>(c, "linear_value_head_dim", 0);
    m.convKernel = num<int64_t>(c, "linear_conv_kernel_dim", 4);
    if (c.contains("layer_types") && c["layer_types"].is_array()) {
        const auto &t = c["layer_types"];
        for (size_t i = 0; i < t.size() && i < m.gdnLayer.size(); ++i)
            m.gdnLayer[i] = t[i].is_string() && t[i].get<std::string>() == "linear_attention";
    } else {
        const int64_t interval = num<int64_t>(c, "full_attention_interval", 4);
        for (int64_t i = 0; i < m.layers; ++i)
            m.gdnLayer[size_t(i)] = interval <= 0 || (i + 1) % interval != 0;
    }
    if (m.linKeyHeads <= 0 || m.linKeyDim <= 0 || m.linValueHeads <= 0 || m.linValueDim <= 0)
        return makeError(Error::Code::Format, "Qwen3-Next config lacks linear_* head sizes")
            .inFile(origin);
    return Ok{};
}

} // namespace

// What every family has (Llama's fields), then each family's own.
Result<ModelSpec> fromHuggingFace(const json &c, const std::string &origin)
{
    ModelSpec m;
    const std::string type = text(c, "model_type", std::string());
    m.family = type.empty() ? "llama" : type;
    m.hidden = num<int64_t>(c, "hidden_size", 0);
    m.layers = num<int64_t>(c, "num_hidden_layers", 0);
    m.heads = num<int64_t>(c, "num_attention_heads", 0);
    m.groups = num<int64_t>(c, "num_key_value_heads", m.heads);
    m.headDim = num<int64_t>(c, "head_dim", m.heads ? m.hidden / m.heads : 0);
    m.ffn = num<int64_t>(c, "intermediate_size", 0);
    m.vocab = num<int64_t>(c, "vocab_size", 0);
    m.tied = num<int>(c, "tie_word_embeddings", 0) != 0;
    const std::string act = text(c, "hidden_act", "silu");
    m.gated = act == "silu" || act == "swiglu" || act == "swish";
    m.qkvBias = num<int>(c, "attention_bias", type == "qwen2" || type == "qwen2_moe") != 0;
    m.qkNorm = type == "qwen3" || type == "qwen3_moe" || type == "qwen3_next";
    if (m.hidden <= 0 || m.layers <= 0 || m.vocab <= 0)
        return makeError(Error::Code::Format,
                         "config lacks hidden_size, num_hidden_layers or vocab_size")
            .inFile(origin);
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    m.moeLayer.assign(size_t(m.layers), false);
    m.gdnLayer.assign(size_t(m.layers), false);

    if (type == "deepseek_v3" || type == "deepseek_v2" || c.contains("kv_lora_rank")) {
        if (Status st = readDeepSeek(c, type, m, origin); !st)
            return st.error();
    } else {
        readExperts(c, type, m);
    }
    if (type == "qwen3_next" || c.contains("linear_num_value_heads"))
        if (Status st = readGatedDeltaNet(c, m, origin); !st)
            return st.error();
    // What Megatron-Bridge's providers give TransformerBlock: a moe_layer_freq list for
    // DeepSeek's families (even with no dense layer) and wherever dense and MoE layers mix, and
    // linear attention layers for Qwen3-Next; each forces per-layer torch_dist keys.
    const bool mixed =
        std::any_of(m.moeLayer.begin(), m.moeLayer.end(), [](bool b) { return b; }) &&
        !std::all_of(m.moeLayer.begin(), m.moeLayer.end(), [](bool b) { return b; });
    if (std::any_of(m.gdnLayer.begin(), m.gdnLayer.end(), [](bool b) { return b; }))
        m.perLayerKeys = "linear attention layers (Megatron-Bridge's linear_attention_freq)";
    else if (m.mla && m.experts > 0)
        m.perLayerKeys = "moe_layer_freq is a list (Megatron-Bridge's DeepSeek providers)";
    else if (mixed)
        m.perLayerKeys = "dense and MoE layers mixed (moe_layer_freq is a list)";
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    return m;
}

} // namespace shardscope::detail
