// SPDX-License-Identifier: MIT
// Layouts generated from a model config, without building the model. Parameter names and shapes
// follow Megatron's TE layer specs (docs/formats.md §7); fusions follow its fsdp_dtensor handlers
// (§6).
#include "shardscope/checkpoint.h"
#include "shardscope/layout.h"

#include "common/regularfile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace shardscope {

using nlohmann::json;

namespace {

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
    int64_t linKeyHeads = 0, linKeyDim = 0, linValueHeads = 0, linValueDim = 0, convKernel = 4;
};

// A config's numbers are read saturated at ±2^30, so that no product of two of them overflows
// before checkSize() turns a value beyond the model bounds into an error.
constexpr int64_t kSaturate = int64_t(1) << 30;
// A config.json or a Megatron argument file is kilobytes.
constexpr uint64_t kMaxConfigBytes = uint64_t(64) << 20;

template<typename T>
T num(const json &j, const char *key, T fallback)
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

std::string text(const json &j, const char *key, std::string fallback)
{
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// What a model of any size has. Beyond these a config lies: its layout would take memory
// without bound (a parameter per layer and expert) or overflow a shape.
Status checkSize(const ModelSpec &m, const std::string &origin)
{
    struct Bound
    {
        const char *name;
        int64_t value, max;
    };
    constexpr int64_t dim = int64_t(1) << 22, count = int64_t(1) << 16;
    const Bound bounds[] = {
        {"layers", m.layers, 10'000},
        {"hidden size", m.hidden, dim},
        {"attention heads", m.heads, count},
        {"query groups", m.groups, count},
        {"head size", m.headDim, count},
        {"FFN size", m.ffn, dim},
        {"vocabulary", m.vocab, dim * 4},
        {"positions", m.positions, dim * 4},
        {"experts", m.experts, count},
        {"expert FFN size", m.moeFfn, dim},
        {"shared expert FFN", m.sharedFfn, dim},
        {"MTP layers", m.mtpLayers, 1'000},
        {"q LoRA rank", m.qLora, dim},
        {"KV LoRA rank", m.kvLora, dim},
        {"qk nope head size", m.qkNope, count},
        {"qk rope head size", m.qkRope, count},
        {"v head size", m.vHead, count},
        {"linear key heads", m.linKeyHeads, count},
        {"linear key size", m.linKeyDim, count},
        {"linear value heads", m.linValueHeads, count},
        {"linear value size", m.linValueDim, count},
        {"conv kernel", m.convKernel, count},
    };
    for (const Bound &b : bounds)
        if (b.value < 0 || b.value > b.max)
            return makeError(Error::Code::Limit,
                             std::string(b.name) + " " + std::to_string(b.value) +
                                 (b.value >= kSaturate ? " or more" : "") + " is not in [0, " +
                                 std::to_string(b.max) + "]")
                .inFile(origin);
    if (m.layers * std::max<int64_t>(1, m.experts) > 10'000'000)
        return makeError(Error::Code::Limit, std::to_string(m.layers) + " layers of " +
                                                 std::to_string(m.experts) +
                                                 " experts: over ten million parameters")
            .inFile(origin);
    return Ok{};
}

bool isMegatronArgs(const json &j)
{
    return j.contains("num_layers") || j.contains("ffn_hidden_size") || j.contains("swiglu");
}

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
    } else {
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
    if (type == "qwen3_next" || c.contains("linear_num_value_heads")) {
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
    }
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    return m;
}

// Megatron's argparse names (megatron/training/arguments.py).
// A Python list expression as Megatron's --moe-layer-freq takes it: "[0]*3+[1]*58",
// "([1]*2)", "[1,0,1]"; nullopt when the text is anything else.
std::optional<std::vector<int>> intListExpression(std::string text)
{
    std::erase_if(text, [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
    while (text.size() >= 2 && text.front() == '(' && text.back() == ')')
        text = text.substr(1, text.size() - 2);
    std::vector<int> out;
    size_t at = 0;
    while (at < text.size()) {
        if (text[at] != '[')
            return std::nullopt;
        const size_t close = text.find(']', at);
        if (close == std::string::npos)
            return std::nullopt;
        std::vector<int> items;
        std::string body = text.substr(at + 1, close - at - 1);
        for (size_t b = 0; b < body.size();) {
            size_t e = body.find(',', b);
            if (e == std::string::npos)
                e = body.size();
            const std::string item = body.substr(b, e - b);
            if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
                return std::nullopt;
            items.push_back(std::stoi(item));
            b = e + 1;
        }
        at = close + 1;
        int64_t repeat = 1;
        if (at < text.size() && text[at] == '*') {
            const size_t end = text.find_first_not_of("0123456789", at + 1);
            const std::string n =
                text.substr(at + 1, end == std::string::npos ? end : end - at - 1);
            if (n.empty() || n.size() > 6)
                return std::nullopt;
            repeat = std::stoll(n);
            at = end == std::string::npos ? text.size() : end;
        }
        for (int64_t r = 0; r < repeat; ++r)
            out.insert(out.end(), items.begin(), items.end());
        if (at < text.size()) {
            if (text[at] != '+')
                return std::nullopt;
            ++at;
        }
    }
    return out.empty() ? std::nullopt : std::optional(out);
}

Result<ModelSpec> fromMegatronArgs(const json &a, const std::string &origin)
{
    ModelSpec m;
    m.hidden = num<int64_t>(a, "hidden_size", 0);
    m.layers = num<int64_t>(a, "num_layers", 0);
    m.heads = num<int64_t>(a, "num_attention_heads", 0);
    m.groups = num<int>(a, "group_query_attention", 0)
                   ? num<int64_t>(a, "num_query_groups", m.heads)
                   : m.heads;
    m.headDim = num<int64_t>(a, "kv_channels", m.heads ? m.hidden / m.heads : 0);
    m.ffn = num<int64_t>(a, "ffn_hidden_size", 4 * m.hidden);
    m.vocab = num<int64_t>(a, "padded_vocab_size", 0);
    if (m.vocab <= 0) { // _vocab_size_with_padding: a multiple of divisible_by × TP
        const int64_t multiple =
            std::max<int64_t>(1, num<int64_t>(a, "make_vocab_size_divisible_by", 128)) *
            std::max<int64_t>(1, num<int64_t>(a, "tensor_model_parallel_size", 1));
        const int64_t vocab = num<int64_t>(a, "vocab_size", 0);
        m.vocab = (vocab + multiple - 1) / multiple * multiple;
    }
    m.tied = num<int>(a, "untie_embeddings_and_output_weights", 0) == 0;
    m.gated = num<int>(a, "swiglu", 0) != 0;
    m.qkNorm = num<int>(a, "qk_layernorm", 0) != 0;
    m.transformerEngine = text(a, "transformer_impl", "transformer_engine") != "local";
    // Argparse dests, and the flags' own names as `--flag` text gives them.
    m.linearBias = num<int>(a, "add_bias_linear", !num<int>(a, "disable_bias_linear", 0)) != 0;
    m.qkvBias = m.linearBias || num<int>(a, "add_qkv_bias", 0) != 0; // validate_args syncs them
    const std::string normalization = text(a, "normalization", "LayerNorm");
    if (normalization != "LayerNorm" && normalization != "RMSNorm")
        return makeError(Error::Code::Format,
                         "key 'normalization': '" + normalization + "' (LayerNorm or RMSNorm)")
            .inFile(origin);
    m.normBias = normalization == "LayerNorm";
    const bool rotary = num<int>(a, "use_rotary_position_embeddings", 0) != 0;
    const std::string positions =
        text(a, "position_embedding_type", rotary ? "rope" : "learned_absolute");
    const bool addPositions =
        num<int>(a, "add_position_embedding", !num<int>(a, "no_position_embedding", 0)) != 0;
    if (positions == "learned_absolute" && addPositions) {
        m.positions = num<int64_t>(a, "max_position_embeddings", num<int64_t>(a, "seq_length", 0));
        if (m.positions <= 0)
            return makeError(Error::Code::Format,
                             "key 'max_position_embeddings': learned absolute positions need it")
                .inFile(origin);
    }
    m.sequentialExperts = num<int>(a, "moe_grouped_gemm", 0) == 0;
    if (!m.transformerEngine && !m.sequentialExperts && num<int64_t>(a, "num_experts", 0) > 0)
        return makeError(Error::Code::Format,
                         "key 'moe_grouped_gemm': the local spec builds the legacy GroupedMLP "
                         "(experts.weight1/weight2), which layouts do not model")
            .inFile(origin);
    m.mlaFusion = num<int>(a, "mla_down_proj_fusion", 0) != 0;
    if (m.hidden <= 0 || m.layers <= 0 || m.vocab <= 0)
        return makeError(Error::Code::Format,
                         "arguments lack hidden_size, num_layers or padded_vocab_size")
            .inFile(origin);
    m.family = "megatron";
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    m.moeLayer.assign(size_t(m.layers), false);
    m.gdnLayer.assign(size_t(m.layers), false);
    m.experts = num<int64_t>(a, "num_experts", 0);
    m.moeFfn = num<int64_t>(a, "moe_ffn_hidden_size", m.ffn);
    m.sharedFfn = num<int64_t>(a, "moe_shared_expert_intermediate_size", 0);
    m.sharedGate = num<int>(a, "moe_shared_expert_gate", 0) != 0;
    m.expertBias = num<int>(a, "moe_router_enable_expert_bias", 0) != 0;
    if (m.experts > 0) {
        auto it = a.find("moe_layer_freq");
        std::optional<std::vector<int>> pattern;
        if (it != a.end() && it->is_string() &&
            it->get<std::string>().find('[') != std::string::npos) {
            // Megatron's moe_freq_type evaluates the text as Python: "([0]*3+[1]*58)".
            pattern = intListExpression(it->get<std::string>());
            if (!pattern)
                return makeError(Error::Code::Format,
                                 "key 'moe_layer_freq': cannot read '" + it->get<std::string>() +
                                     "' (an int, a list, or a sum of [..]*n terms)")
                    .inFile(origin);
        } else if (it != a.end() && it->is_array()) {
            pattern = std::vector<int>();
            for (const json &v : *it)
                pattern->push_back(v.is_number() ? v.get<int>() : 0);
        }
        if (pattern) {
            if (pattern->size() != size_t(m.layers))
                return makeError(Error::Code::Format,
                                 "key 'moe_layer_freq': " + std::to_string(pattern->size()) +
                                     " entries for " + std::to_string(m.layers) + " layers")
                    .inFile(origin);
            for (size_t i = 0; i < pattern->size(); ++i)
                m.moeLayer[i] = (*pattern)[i] != 0;
        } else {
            const int64_t freq = num<int64_t>(a, "moe_layer_freq", 1);
            for (int64_t i = 0; i < m.layers; ++i)
                m.moeLayer[size_t(i)] = freq > 0 && i % freq == 0;
        }
    }
    if (num<int>(a, "multi_latent_attention", 0)) {
        m.mla = true;
        m.family = "megatron_mla";
        m.qLora = num<int64_t>(a, "q_lora_rank", 0);
        m.kvLora = num<int64_t>(a, "kv_lora_rank", 32); // arguments.py's defaults
        m.qkNope = num<int64_t>(a, "qk_head_dim", 128);
        m.qkRope = num<int64_t>(a, "qk_pos_emb_head_dim", 64);
        m.vHead = num<int64_t>(a, "v_head_dim", 128);
    }
    m.mtpLayers = num<int64_t>(a, "mtp_num_layers", 0);
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    return m;
}

// Builds the parameter list of a ModelSpec.
class Builder
{
public:
    Builder(const ModelSpec &m, const LayoutOptions &o, Layout &l, bool released016)
        : m(m)
        , o(o)
        , l(l)
        , m_released016(released016)
    {}

    void build()
    {
        add("embedding.word_embeddings.weight", {m.vocab, m.hidden}, 0);
        if (m.positions > 0)
            add("embedding.position_embeddings.weight", {m.positions, m.hidden});
        for (int64_t i = 0; i < m.layers; ++i)
            layer("decoder.layers." + std::to_string(i), size_t(i), m.moeLayer[size_t(i)]);
        norm("decoder.final_layernorm.weight", m.hidden);
        for (int64_t k = 0; k < m.mtpLayers; ++k) {
            const std::string p = "mtp.layers." + std::to_string(k);
            norm(p + ".enorm.weight", m.hidden);
            norm(p + ".hnorm.weight", m.hidden);
            add(p + ".eh_proj.weight", {m.hidden, 2 * m.hidden}, 0);
            // DeepSeek's MTP layer is a MoE layer like the last decoder layer.
            layer(p + "." + l.mtpInner, m.moeLayer.empty() ? 0 : m.moeLayer.size() - 1,
                  m.experts > 0);
            norm(p + ".final_layernorm.weight", m.hidden);
        }
        if (!m.tied)
            add("output_layer.weight", {m.vocab, m.hidden}, 0);
    }

private:
    LayoutParam &add(std::string name, std::vector<int64_t> shape, int tpDim = -1)
    {
        LayoutParam p;
        p.name = std::move(name);
        p.shape = std::move(shape);
        p.dtype = o.dtype.value_or("float32");
        p.tpDim = tpDim;
        l.params.push_back(std::move(p));
        return l.params.back();
    }
    // `…weight` → `…bias`, `…weight<e>` → `…bias<e>`, `layer_norm_weight` → `layer_norm_bias`.
    static std::string biasOf(const std::string &weight)
    {
        std::string b = weight;
        b.replace(b.rfind("weight"), 6, "bias");
        return b;
    }
    // A norm's weight and, under LayerNorm, its bias. `absorbs`: the module name (without
    // `.weight`) a handler moves it to.
    void norm(const std::string &weight, int64_t size, const std::string &absorbs = {})
    {
        add(weight, {size}).absorbs = absorbs.empty() ? "" : absorbs + ".weight";
        if (m.normBias)
            add(biasOf(weight), {size}).absorbs = absorbs.empty() ? "" : absorbs + ".bias";
    }
    // A linear's bias under add_bias_linear: split like the weight's rows (column-parallel) or
    // whole on every TP rank (row-parallel).
    void bias(const std::string &weight, int64_t rows, bool columnParallel,
              std::optional<int> expert = {})
    {
        if (!m.linearBias)
            return;
        LayoutParam &p = add(biasOf(weight), {rows}, columnParallel ? 0 : -1);
        if (expert)
            p.expert = *expert;
    }
    void fuse(LayoutParam &p, const char *rule, std::vector<std::pair<std::string, int64_t>> s,
              bool interleaved)
    {
        Fusion f;
        f.rule = rule;
        f.dim = 0;
        f.tpInterleaved = interleaved;
        for (auto &[name, size] : s)
            f.sections.push_back({std::move(name), size});
        p.fusion = std::move(f);
    }
    // SwiGLU fc1 ([W; V]) of a GLU layer; GELU layers keep fc1 unfused. Its bias is fused the
    // same way (handle_swiglu_in_state_dict splits weight and bias alike).
    void fc1(const std::string &name, int64_t ffn, std::optional<int> expert = {})
    {
        LayoutParam &p = add(name, {(m.gated ? 2 : 1) * ffn, m.hidden}, 0);
        if (expert)
            p.expert = *expert;
        if (m.gated)
            fuse(p, "swiglu", {{name + "_w", ffn}, {name + "_v", ffn}}, true);
        if (!m.linearBias)
            return;
        const std::string b = biasOf(name);
        bias(name, (m.gated ? 2 : 1) * ffn, true, expert);
        if (m.gated)
            fuse(l.params.back(), "swiglu", {{b + "_w", ffn}, {b + "_v", ffn}}, true);
    }
    void fc2(const std::string &name, int64_t ffn, std::optional<int> expert = {})
    {
        LayoutParam &p = add(name, {m.hidden, ffn}, 1);
        if (expert)
            p.expert = *expert;
        bias(name, m.hidden, false, expert);
    }

    void layer(const std::string &p, size_t index, bool moe)
    {
        const std::string att = p + ".self_attention";
        if (m.gdnLayer.size() > index && m.gdnLayer[index])
            gdn(att);
        else if (m.mla)
            mla(p, att);
        else
            attention(p, att);
        if (!moe) {
            // TE fuses the pre-MLP norm into linear_fc1; the local spec keeps the module.
            norm(m.transformerEngine ? p + ".mlp.linear_fc1.layer_norm_weight"
                                     : p + ".pre_mlp_layernorm.weight",
                 m.hidden);
            fc1(p + ".mlp.linear_fc1.weight", m.ffn);
            fc2(p + ".mlp.linear_fc2.weight", m.ffn);
            return;
        }
        norm(p + ".pre_mlp_layernorm.weight", m.hidden);
        add(p + ".mlp.router.weight", {m.experts, m.hidden});
        bias(p + ".mlp.router.weight", m.experts, false);
        if (m.expertBias)
            add(p + ".mlp.router.expert_bias", {m.experts}).hasOptimizerState = false;
        const int experts =
            o.localExperts && l.parallel.ep > 1 ? int(m.experts) / l.parallel.ep : int(m.experts);
        const bool sequential = o.sequentialExperts || m.sequentialExperts;
        auto expert = [&](int e, const char *linear) {
            return sequential ? p + ".mlp.experts.local_experts." + std::to_string(e) + "." +
                                    linear + ".weight"
                              : p + ".mlp.experts." + linear + ".weight" + std::to_string(e);
        };
        for (int e = 0; e < experts; ++e)
            fc1(expert(e, "linear_fc1"), m.moeFfn, e);
        for (int e = 0; e < experts; ++e)
            fc2(expert(e, "linear_fc2"), m.moeFfn, e);
        if (m.sharedFfn > 0) {
            fc1(p + ".mlp.shared_experts.linear_fc1.weight", m.sharedFfn);
            fc2(p + ".mlp.shared_experts.linear_fc2.weight", m.sharedFfn);
            if (m.sharedGate)
                add(p + ".mlp.shared_experts.gate_weight", {1, m.hidden});
        }
    }

    void attention(const std::string &layerPath, const std::string &att)
    {
        norm(m.transformerEngine ? att + ".linear_qkv.layer_norm_weight"
                                 : layerPath + ".input_layernorm.weight",
             m.hidden);
        const int64_t perGroup = m.groups ? m.heads / m.groups : 0;
        const int64_t rows = m.groups * ((m.attentionGate ? 2 : 1) * perGroup + 2) * m.headDim;
        add(att + ".linear_qkv.weight", {rows, m.hidden}, 0);
        if (m.qkvBias)
            add(att + ".linear_qkv.bias", {rows}, 0);
        if (m.qkNorm) {
            norm(att + ".q_layernorm.weight", m.headDim);
            norm(att + ".k_layernorm.weight", m.headDim);
        }
        add(att + ".linear_proj.weight", {m.hidden, m.heads * m.headDim}, 1);
        bias(att + ".linear_proj.weight", m.hidden, false);
    }

    // MLA as Megatron's specs build it (gpt_layer_specs.py): the TE spec fuses the q/kv norms
    // into linear_q_up_proj / linear_kv_up_proj under qk_layernorm, the local spec keeps
    // q_layernorm / kv_layernorm modules; the down projections and their input norm are fused
    // only where the version has mla_down_proj_fusion and it is on.
    void mla(const std::string &layerPath, const std::string &att)
    {
        const int64_t qHead = m.qkNope + m.qkRope;
        const bool te = m.transformerEngine;
        const bool fused =
            m.qLora > 0 && te && !m_released016 && o.mlaDownProjFusion.value_or(m.mlaFusion);
        if (fused) {
            // TELayerNormColumnParallelLinear: the layer's input norm lives in the fused linear.
            norm(att + ".linear_qkv_down_proj.layer_norm_weight", m.hidden,
                 layerPath + ".input_layernorm");
            LayoutParam &d = add(att + ".linear_qkv_down_proj.weight",
                                 {m.qLora + m.kvLora + m.qkRope, m.hidden}, 0);
            fuse(d, "mla_down_proj",
                 {{att + ".linear_q_down_proj.weight", m.qLora},
                  {att + ".linear_kv_down_proj.weight", m.kvLora + m.qkRope}},
                 true);
        } else {
            norm(layerPath + ".input_layernorm.weight", m.hidden);
            if (m.qLora > 0)
                add(att + ".linear_q_down_proj.weight", {m.qLora, m.hidden});
            add(att + ".linear_kv_down_proj.weight", {m.kvLora + m.qkRope, m.hidden});
        }
        if (m.qLora > 0) {
            if (m.qkNorm)
                norm(te ? att + ".linear_q_up_proj.layer_norm_weight" : att + ".q_layernorm.weight",
                     m.qLora);
            add(att + ".linear_q_up_proj.weight", {m.heads * qHead, m.qLora}, 0);
        } else {
            // No query LoRA: under qk_layernorm Megatron's TE spec (after 0.16) fuses a query
            // norm into linear_q_proj (TELayerNormColumnParallelLinear). It is no input norm:
            // the layer keeps its input_layernorm, and nothing maps one onto the other.
            if (o.mlaQueryNorm.value_or(m.qkNorm && te && !m_released016))
                norm(att + ".linear_q_proj.layer_norm_weight", m.hidden);
            add(att + ".linear_q_proj.weight", {m.heads * qHead, m.hidden}, 0);
        }
        if (m.qkNorm)
            norm(te ? att + ".linear_kv_up_proj.layer_norm_weight" : att + ".kv_layernorm.weight",
                 m.kvLora);
        add(att + ".linear_kv_up_proj.weight", {m.heads * (m.qkNope + m.vHead), m.kvLora}, 0);
        add(att + ".linear_proj.weight", {m.hidden, m.heads * m.vHead}, 1);
        bias(att + ".linear_proj.weight", m.hidden, false);
    }

    void gdn(const std::string &att)
    {
        const int64_t qk = m.linKeyHeads * m.linKeyDim, v = m.linValueHeads * m.linValueDim,
                      nvh = m.linValueHeads;
        const int64_t tp = o.gdnTpLocal ? l.parallel.tp : 1;
        add(att + ".in_proj.layer_norm_weight", {m.hidden});
        const std::string in = att + ".in_proj.weight";
        LayoutParam &ip = add(in, {(2 * qk + 2 * v + 2 * nvh) / tp, m.hidden}, 0);
        fuse(ip, "gdn",
             {{in + ".query", qk},
              {in + ".key", qk},
              {in + ".value", v},
              {in + ".z", v},
              {in + ".beta", nvh},
              {in + ".alpha", nvh}},
             true);
        ip.fusion->tpLocal = o.gdnTpLocal;
        const std::string conv = att + ".conv1d.weight";
        LayoutParam &cv = add(conv, {(2 * qk + v) / tp, 1, m.convKernel}, 0);
        fuse(cv, "gdn", {{conv + ".query", qk}, {conv + ".key", qk}, {conv + ".value", v}}, true);
        cv.fusion->tpLocal = o.gdnTpLocal;
        add(att + ".A_log", {nvh}, 0);
        add(att + ".dt_bias", {nvh}, 0);
        add(att + ".out_norm.weight", {m.linValueDim});
        add(att + ".out_proj.weight", {m.hidden, v}, 1);
    }

    const ModelSpec &m;
    const LayoutOptions &o;
    Layout &l;
    /** Megatron-Core 0.16 or older: no fused MLA down projection, no fused query norm. */
    bool m_released016;
};

// `--flag value` text (a Megatron command line or args file) → JSON of argparse names.
json parseFlags(const std::string &text)
{
    json j = json::object();
    std::istringstream in(text);
    std::vector<std::string> words;
    for (std::string w; in >> w;)
        if (w != "\\")
            words.push_back(w);
    for (size_t i = 0; i < words.size(); ++i) {
        if (!words[i].starts_with("--"))
            continue;
        std::string name = words[i].substr(2);
        std::replace(name.begin(), name.end(), '-', '_');
        if (i + 1 < words.size() && !words[i + 1].starts_with("--")) {
            std::vector<std::string> values;
            while (i + 1 < words.size() && !words[i + 1].starts_with("--"))
                values.push_back(words[++i]);
            if (values.size() == 1) {
                j[name] = values[0];
            } else {
                json arr = json::array();
                for (const auto &v : values)
                    arr.push_back(std::stoll(v));
                j[name] = arr;
            }
        } else {
            j[name] = true;
        }
    }
    return j;
}

// A Megatron args Namespace (a checkpoint's `args` entry) → JSON of its plain fields.
json argsToJson(const PyValue &args)
{
    json j = json::object();
    const PyValue *state = args.kind == PyValue::Kind::Object && args.items.size() > 1
                               ? &args.items[1]
                               : (args.kind == PyValue::Kind::Dict ? &args : nullptr);
    if (!state || state->kind != PyValue::Kind::Dict)
        return j;
    for (const auto &[k, v] : state->dict) {
        if (k.kind != PyValue::Kind::Str)
            continue;
        switch (v.kind) {
        case PyValue::Kind::Bool:
            j[k.text] = v.boolean;
            break;
        case PyValue::Kind::Int:
            j[k.text] = v.integer;
            break;
        case PyValue::Kind::Float:
            j[k.text] = v.real;
            break;
        case PyValue::Kind::Str:
            j[k.text] = v.text;
            break;
        case PyValue::Kind::List:
        case PyValue::Kind::Tuple: {
            json a = json::array();
            for (const PyValue &e : v.items)
                if (e.kind == PyValue::Kind::Int || e.kind == PyValue::Kind::Bool)
                    a.push_back(e.kind == PyValue::Kind::Int ? e.integer : int64_t(e.boolean));
            j[k.text] = a;
            break;
        }
        default:
            break;
        }
    }
    return j;
}

// The arguments a Megatron checkpoint was saved with: its `args` entry (DCP BYTE_IO, common.pt
// or a legacy model_optim_rng.pt).
Result<json> argsOfCheckpoint(const std::string &path)
{
    auto index = openCheckpoint(path);
    if (!index)
        return index.error();
    for (const ObjectEntry &o : index->objects) {
        if (o.key != "args" && !o.key.ends_with("/args"))
            continue;
        auto value = readObject(*index, o);
        if (!value)
            return value.error();
        json j = argsToJson(*value);
        if (j.empty())
            return makeError(Error::Code::Format, "args is not an argparse.Namespace")
                .inFile(path)
                .atKey(o.key);
        return j;
    }
    return makeError(Error::Code::NotFound,
                     "the checkpoint has no args entry to generate a layout from")
        .inFile(path);
}

// Whether a --megatron-version names a release up to 0.16 (no MLA down-projection fusion, no
// fused query norm); "main" is the development branch after it.
Result<bool> released016(const std::string &version, const std::string &origin)
{
    if (version == "main")
        return false;
    int major = 0, minor = 0;
    char dot = 0;
    std::istringstream in(version);
    if (!(in >> major >> dot >> minor) || dot != '.' || major < 0 || minor < 0)
        return makeError(Error::Code::Unsupported,
                         "--megatron-version '" + version + "': a release (0.16, 0.15.2) or 'main'")
            .inFile(origin);
    return major == 0 && minor <= 16;
}

} // namespace

// The parallel sizes a Megatron argument set was run with (what a resume plans for, and what a
// legacy checkpoint's rank files are cut by); the options' where the arguments are silent.
ParallelConfig savedParallel(const json &a, const LayoutOptions &options)
{
    ParallelConfig p = options.parallel;
    p.tp = num<int>(a, "tensor_model_parallel_size", p.tp);
    p.pp = num<int>(a, "pipeline_model_parallel_size", p.pp);
    p.ep = num<int>(a, "expert_model_parallel_size", p.ep);
    p.etp = num<int>(a, "expert_tensor_parallel_size", p.tp);
    p.firstStageLayers = num<int>(a, "decoder_first_pipeline_num_layers", p.firstStageLayers);
    p.lastStageLayers = num<int>(a, "decoder_last_pipeline_num_layers", p.lastStageLayers);
    for (int *v : {&p.tp, &p.pp, &p.ep, &p.etp})
        *v = std::max(1, *v);
    return p;
}

namespace {

Result<Layout> layoutFromConfigUnguarded(const std::string &path, const LayoutOptions &options)
{
    std::error_code ec;
    const bool checkpoint = std::filesystem::is_directory(path, ec) || path.ends_with(".pt");
    if (checkpoint) {
        auto args = argsOfCheckpoint(path);
        if (!args)
            return args.error();
        auto spec = fromMegatronArgs(*args, path);
        if (!spec)
            return spec.error();
        LayoutOptions o = options;
        const bool fsdp = args->value("ckpt_format", std::string()) == "fsdp_dtensor";
        if (!o.dtype && !fsdp)
            o.dtype = num<int>(*args, "bf16", 0)   ? "bfloat16"
                      : num<int>(*args, "fp16", 0) ? "float16"
                                                   : "float32";
        Layout l;
        l.family = spec->family;
        l.source = path;
        l.parallel = options.parallelGiven ? options.parallel : savedParallel(*args, options);
        o.parallel = l.parallel;
        l.numExperts = int(spec->experts);
        l.transformerEngine = spec->transformerEngine;
        l.linearExtraState = true; // Megatron's linears keep one, TE or not
        auto old = released016(options.megatronVersion, path);
        if (!old)
            return old.error();
        Builder(*spec, o, l, *old).build();
        return l;
    }
    auto read = detail::readRegularFile(path, kMaxConfigBytes);
    if (!read)
        return read.error();
    const std::string &text = *read;
    json c = json::parse(text, nullptr, false);
    bool flags = false;
    if (c.is_discarded()) {
        try {
            c = parseFlags(text);
        } catch (...) {
            return makeError(Error::Code::Format, "neither JSON nor --flag value text")
                .inFile(path);
        }
        flags = true;
    }
    if (!c.is_object())
        return makeError(Error::Code::Format, "config is not a JSON object").inFile(path);
    // Megatron checkpoints keep their arguments as {"args": {...}} in some exports.
    if (c.contains("args") && c["args"].is_object())
        c = c["args"];
    const bool megatron = flags || isMegatronArgs(c);
    Result<ModelSpec> spec = megatron ? fromMegatronArgs(c, path) : fromHuggingFace(c, path);
    if (!spec)
        return spec.error();
    Layout l;
    l.family = spec->family;
    l.source = path;
    l.parallel = megatron && !options.parallelGiven ? savedParallel(c, options) : options.parallel;
    l.numExperts = int(spec->experts);
    l.expertsGlobal = !(options.localExperts && l.parallel.ep > 1);
    l.transformerEngine = spec->transformerEngine;
    l.linearExtraState = true; // Megatron's linears keep one, TE or not
    if (l.parallel.ep > 1 && spec->experts % l.parallel.ep != 0)
        return makeError(Error::Code::Format, "--ep " + std::to_string(l.parallel.ep) +
                                                  " does not divide the " +
                                                  std::to_string(spec->experts) + " experts")
            .inFile(path);
    if (l.parallel.tp > 1 && spec->groups % l.parallel.tp != 0 && !spec->mla && spec->groups > 0)
        return makeError(Error::Code::Format, "--tp " + std::to_string(l.parallel.tp) +
                                                  " does not divide the " +
                                                  std::to_string(spec->groups) + " query groups")
            .inFile(path);
    LayoutOptions o = options;
    o.parallel = l.parallel;
    auto old = released016(options.megatronVersion, path);
    if (!old)
        return old.error();
    Builder(*spec, o, l, *old).build();
    return l;
}

} // namespace

Result<Layout> layoutFromConfig(const std::string &path, const LayoutOptions &options)
{
    // The readers check what they take; this is the boundary's guarantee that a config no
    // check foresaw is an error, never an exception (found by fuzz/config_fuzzer.cpp).
    try {
        return layoutFromConfigUnguarded(path, options);
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format, std::string("unreadable config: ") + e.what())
            .inFile(path);
    }
}

} // namespace shardscope
