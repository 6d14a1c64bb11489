// SPDX-License-Identifier: MIT
// The parameters of a model in Megatron's terms: names and shapes as Megatron's TE layer specs
// make them (docs/formats.md §7), fusions as its fsdp_dtensor handlers split them (§6).
#include "layout/modelspec.h"

namespace shardscope::detail {

namespace {

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
        l.torchDistLayers =
            m.perLayerKeys.empty() ? Layout::LayerKeys::Stacked : Layout::LayerKeys::PerLayer;
        l.torchDistLayersWhy = m.perLayerKeys.empty() ? "a homogeneous block" : m.perLayerKeys;
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
        else // no weight of its own: the embedding's (share_embeddings_and_output_weights)
            l.ties.push_back({"embedding.word_embeddings.weight", "output_layer.weight"});
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
            // The TE spec builds the down projections as TELinear(parallel_mode='duplicated'),
            // whole on every TP rank; the local spec as ColumnParallelLinear, split by rows
            // (multi_latent_attention.py gathers their outputs itself).
            const int downTpDim = te ? -1 : 0;
            if (m.qLora > 0)
                add(att + ".linear_q_down_proj.weight", {m.qLora, m.hidden}, downTpDim);
            add(att + ".linear_kv_down_proj.weight", {m.kvLora + m.qkRope, m.hidden}, downTpDim);
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

} // namespace

void buildParameters(const ModelSpec &m, const LayoutOptions &o, Layout &l, bool released016)
{
    Builder(m, o, l, released016).build();
}

} // namespace shardscope::detail
