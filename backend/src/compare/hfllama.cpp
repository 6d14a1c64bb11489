// SPDX-License-Identifier: MIT
// A Hugging Face Llama-family checkpoint read under Megatron's names, as Megatron-Bridge's
// published conversion maps them (its LlamaBridge: QKVMapping interleaves q, k and v per query
// group into linear_qkv; GatedMLPMapping concatenates gate and up into linear_fc1; the rest are
// renames). A tensor outside the mapping is not compared, never guessed.
#include "compare/compare.h"

#include "common/regularfile.h"

#include <nlohmann/json.hpp>

#include <regex>

namespace shardscope::detail {

std::optional<HfLlama> hfLlamaOf(const CheckpointIndex &index)
{
    if (index.format != Format::Safetensors && index.format != Format::SafetensorsIndex &&
        index.format != Format::TorchSave && index.format != Format::TorchSaveIndex)
        return std::nullopt;
    if (!index.findTensor("model.layers.0.self_attn.q_proj.weight"))
        return std::nullopt;
    auto text = readRegularFile(configBeside(index), 64u << 20);
    if (!text)
        return std::nullopt;
    const auto c = nlohmann::json::parse(*text, nullptr, false);
    if (!c.is_object())
        return std::nullopt;
    auto num = [&](const char *k, int64_t fallback) {
        auto it = c.find(k);
        return it != c.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
    };
    HfLlama hf;
    hf.heads = num("num_attention_heads", 0);
    hf.groups = num("num_key_value_heads", hf.heads);
    const int64_t hidden = num("hidden_size", 0);
    hf.headDim = num("head_dim", hf.heads > 0 ? hidden / hf.heads : 0);
    if (hf.heads <= 0 || hf.groups <= 0 || hf.headDim <= 0 || hf.heads % hf.groups != 0)
        return std::nullopt;
    return hf;
}

std::optional<SideValues> hfValues(const HfLlama &hf, const CheckpointIndex &index,
                                   const std::string &name, const std::vector<int64_t> &shape,
                                   std::string &why)
{
    // Each piece: the HF key and which of its rows fill which rows of the Megatron tensor.
    struct Piece
    {
        std::string key;
        int64_t storedRow, rows;
    };
    std::vector<Piece> pieces;
    auto whole = [&](const std::string &key) { pieces.push_back({key, 0, -1}); };
    static const std::regex layer(R"(^decoder\.layers\.(\d+)\.(.+)$)");
    std::smatch m;
    if (name == "embedding.word_embeddings.weight") {
        whole("model.embed_tokens.weight");
    } else if (name == "output_layer.weight") {
        whole("lm_head.weight");
    } else if (name == "decoder.final_layernorm.weight") {
        whole("model.norm.weight");
    } else if (std::regex_match(name, m, layer)) {
        const std::string hfLayer = "model.layers." + m[1].str() + ".";
        const std::string rest = m[2].str();
        if (rest == "self_attention.linear_qkv.layer_norm_weight" ||
            rest == "input_layernorm.weight") {
            whole(hfLayer + "input_layernorm.weight");
        } else if (rest == "mlp.linear_fc1.layer_norm_weight" ||
                   rest == "pre_mlp_layernorm.weight") {
            whole(hfLayer + "post_attention_layernorm.weight");
        } else if (rest == "self_attention.linear_proj.weight") {
            whole(hfLayer + "self_attn.o_proj.weight");
        } else if (rest == "mlp.linear_fc2.weight") {
            whole(hfLayer + "mlp.down_proj.weight");
        } else if (rest == "self_attention.q_layernorm.weight") {
            whole(hfLayer + "self_attn.q_norm.weight");
        } else if (rest == "self_attention.k_layernorm.weight") {
            whole(hfLayer + "self_attn.k_norm.weight");
        } else if (rest == "mlp.linear_fc1.weight") {
            // GatedMLPMapping: [gate; up].
            whole(hfLayer + "mlp.gate_proj.weight");
            whole(hfLayer + "mlp.up_proj.weight");
        } else if (rest == "self_attention.linear_qkv.weight" ||
                   rest == "self_attention.linear_qkv.bias") {
            // QKVMapping: per query group g, [q heads of g; k_g; v_g].
            const std::string leaf = rest.ends_with("bias") ? "bias" : "weight";
            const int64_t perGroup = hf.heads / hf.groups, d = hf.headDim;
            for (int64_t g = 0; g < hf.groups; ++g) {
                pieces.push_back(
                    {hfLayer + "self_attn.q_proj." + leaf, g * perGroup * d, perGroup * d});
                pieces.push_back({hfLayer + "self_attn.k_proj." + leaf, g * d, d});
                pieces.push_back({hfLayer + "self_attn.v_proj." + leaf, g * d, d});
            }
        }
    }
    if (pieces.empty()) {
        why = "Hugging Face checkpoint: no known mapping for it (Megatron-Bridge's Llama-family "
              "mapping covers embeddings, norms, attention and the dense MLP)";
        return std::nullopt;
    }
    SideValues v;
    int64_t row = 0;
    for (const Piece &pc : pieces) {
        const TensorEntry *t = index.findTensor(pc.key);
        if (!t) {
            why = "Hugging Face checkpoint: no " + pc.key;
            return std::nullopt;
        }
        const int64_t rows = pc.rows < 0 ? (t->shape.empty() ? 1 : t->shape[0]) : pc.rows;
        const bool colsMatch = t->shape.size() == shape.size() &&
                               std::equal(t->shape.begin() + (t->shape.empty() ? 0 : 1),
                                          t->shape.end(), shape.begin() + (shape.empty() ? 0 : 1));
        if (!colsMatch || (!t->shape.empty() && pc.storedRow + rows > t->shape[0])) {
            why = "Hugging Face checkpoint: " + pc.key +
                  " does not have the shape the mapping "
                  "expects";
            return std::nullopt;
        }
        DiffSource s;
        s.key = pc.key;
        s.shape = t->shape.toVector();
        s.dtype = t->dtypeName;
        s.begin = row;
        s.end = row + rows;
        s.storedRow = pc.storedRow;
        row += rows;
        if (v.dtype.empty())
            v.dtype = s.dtype;
        else if (v.dtype != s.dtype) {
            why =
                "Hugging Face checkpoint: its pieces are stored as " + v.dtype + " and " + s.dtype;
            return std::nullopt;
        }
        v.sources.push_back(std::move(s));
    }
    if (row != (shape.empty() ? 1 : shape[0])) {
        why = "Hugging Face checkpoint: the mapped tensors have " + std::to_string(row) +
              " rows, the model's " + std::to_string(shape.empty() ? 1 : shape[0]);
        return std::nullopt;
    }
    return v;
}

} // namespace shardscope::detail
