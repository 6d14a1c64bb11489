// SPDX-License-Identifier: MIT
#include "diff/namedcauses.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace shardscope::detail {

std::string KeyPrefix::storedName(std::string_view name) const
{
    if (stored)
        return prefix + std::string(name);
    return std::string(name.starts_with(prefix) ? name.substr(prefix.size()) : name);
}

std::optional<KeyPrefix> commonKeyPrefix(std::span<const std::string_view> stored,
                                         std::span<const std::string_view> wanted)
{
    const std::unordered_set<std::string_view> storedSet(stored.begin(), stored.end());
    const std::unordered_set<std::string_view> wantedSet(wanted.begin(), wanted.end());
    // Per prefix: how many names it maps (strip: a stored key minus it is a wanted name; add:
    // a wanted name minus it is a stored key). Only names not found as they are take part.
    std::unordered_map<std::string_view, size_t> strip, add;
    size_t missing = 0;
    for (std::string_view k : stored)
        if (!wantedSet.count(k))
            for (size_t dot = k.find('.'); dot != std::string_view::npos;
                 dot = k.find('.', dot + 1))
                if (wantedSet.count(k.substr(dot + 1)))
                    ++strip[k.substr(0, dot + 1)];
    for (std::string_view n : wanted) {
        if (storedSet.count(n))
            continue;
        ++missing;
        for (size_t dot = n.find('.'); dot != std::string_view::npos; dot = n.find('.', dot + 1))
            if (storedSet.count(n.substr(dot + 1)))
                ++add[n.substr(0, dot + 1)];
    }
    std::optional<KeyPrefix> best;
    auto consider = [&](const std::unordered_map<std::string_view, size_t> &counts, bool onStored) {
        for (const auto &[p, n] : counts)
            if (!best || n > best->matches || (n == best->matches && p < best->prefix))
                best = KeyPrefix{std::string(p), onStored, n};
    };
    consider(strip, true);
    consider(add, false);
    if (!best || missing == 0 || best->matches * 2 < missing)
        return std::nullopt;
    return best;
}

std::vector<std::string> tiedEmbeddingsOf(std::string_view name)
{
    // Output layer → the embeddings models tie it to (Hugging Face, Megatron, torchtitan/Llama).
    static const std::array<std::pair<std::string_view, std::array<std::string_view, 3>>, 3>
        kHeads = {{
            {"lm_head.weight", {"model.embed_tokens.weight", "transformer.wte.weight", ""}},
            {"output_layer.weight", {"embedding.word_embeddings.weight", "", ""}},
            {"output.weight", {"tok_embeddings.weight", "", ""}},
        }};
    for (const auto &[head, embeddings] : kHeads) {
        if (!name.ends_with(head) ||
            (name.size() > head.size() && name[name.size() - head.size() - 1] != '.'))
            continue;
        const std::string_view outer = name.substr(0, name.size() - head.size());
        std::vector<std::string> out;
        for (std::string_view e : embeddings)
            if (!e.empty())
                out.push_back(std::string(outer) + std::string(e));
        return out;
    }
    return {};
}

std::string recomputedBufferNote(std::string_view key)
{
    struct Buffer
    {
        std::string_view suffix, what;
    };
    static constexpr std::array kBuffers = {
        Buffer{".inv_freq", "rotary embedding frequencies"},
        Buffer{".position_ids", "position ids"},
        Buffer{".masked_bias", "an attention mask constant"},
        Buffer{".attn.bias", "a causal attention mask"},
        Buffer{"._float_tensor", "a placeholder tensor"},
    };
    for (const Buffer &b : kBuffers)
        if (key.ends_with(b.suffix))
            return std::string("a buffer the model recomputes at init (") + std::string(b.what) +
                   "), saved by an older version of its code: harmless to leave out; a strict "
                   "load_state_dict raises Unexpected key(s) on it, so drop it (shardscope-cli "
                   "fix does) or load with strict=False";
    return {};
}

int64_t vocabPaddingMultiple(int64_t stored, int64_t want)
{
    const int64_t big = std::max(stored, want), small = std::min(stored, want);
    if (small <= 0 || big == small)
        return 0;
    const int64_t m = big & -big; // the largest power of two dividing the padded size
    return m >= 8 && big - small < m ? m : 0;
}

std::string peftBaseLayerName(std::string_view name)
{
    const size_t dot = name.rfind('.');
    if (dot == std::string_view::npos || name.find(".base_layer.") != std::string_view::npos)
        return {};
    return std::string(name.substr(0, dot)) + ".base_layer" + std::string(name.substr(dot));
}

std::string peftPlainName(std::string_view name)
{
    std::string s(name.starts_with("base_model.model.") ? name.substr(17) : name);
    if (const size_t at = s.find(".base_layer."); at != std::string::npos)
        s.erase(at, 11);
    return s;
}

bool loraAdapterName(std::string_view name)
{
    for (std::string_view part : {".lora_A.", ".lora_B.", ".lora_embedding_A.",
                                  ".lora_embedding_B.", ".lora_magnitude_vector."})
        if (name.find(part) != std::string_view::npos)
            return true;
    return false;
}

std::string addedBySettingFix(std::string_view name)
{
    const auto ends = [&](std::initializer_list<std::string_view> tails) {
        for (std::string_view t : tails)
            if (name.ends_with(t))
                return true;
        return false;
    };
    if (name == "embedding.position_embeddings.weight" ||
        name.ends_with(".embedding.position_embeddings.weight"))
        return "The model has learned absolute position embeddings (--position-embedding-type "
               "learned_absolute, Megatron's default) and the saving run had none (rope: a "
               "Llama-like checkpoint's args say add_position_embedding=False, "
               "NVIDIA/Megatron-LM#933). Build the model with the saving run's "
               "--position-embedding-type (rope), which adds no such parameter.";
    if (ends({".self_attention.q_layernorm.weight", ".self_attention.k_layernorm.weight",
              ".self_attention.q_layernorm.bias", ".self_attention.k_layernorm.bias"}))
        return "The model normalises queries and keys (--qk-layernorm) and the saving run did "
               "not: build it without --qk-layernorm, as the saving run was, or initialise "
               "the norms deliberately (a partial load leaves them at ones).";
    if (ends({".self_attention.linear_qkv.bias"}))
        return "The model has a bias in linear_qkv (Megatron's default, or --add-qkv-bias) and "
               "the saving run had none: build it with --disable-bias-linear and without "
               "--add-qkv-bias, as Llama-like checkpoints are (mlc-ai/mlc-llm#3494 drops "
               "such biases without a word).";
    if (ends({".self_attention.linear_proj.bias", ".mlp.linear_fc1.bias", ".mlp.linear_fc2.bias"}))
        return "The model has biases in its linear layers (Megatron's default) and the saving "
               "run had none: build it with --disable-bias-linear, as Llama-like checkpoints "
               "are (mlc-ai/mlc-llm#3494).";
    if (ends({".self_attn.q_proj.bias", ".self_attn.k_proj.bias", ".self_attn.v_proj.bias",
              ".self_attn.o_proj.bias"}))
        return "The model's attention projections have biases (attention_bias: true in its "
               "config) and the saving run's had none: build it from the saving run's "
               "config.json (attention_bias: false) (mlc-ai/mlc-llm#3494).";
    if (ends({".mlp.gate_proj.bias", ".mlp.up_proj.bias", ".mlp.down_proj.bias"}))
        return "The model's MLP projections have biases (mlp_bias: true in its config) and the "
               "saving run's had none: build it from the saving run's config.json (mlp_bias: "
               "false) (mlc-ai/mlc-llm#3494).";
    return {};
}

int layerOf(std::string_view name, std::string_view &stem)
{
    for (size_t at = name.find("layers."); at != std::string_view::npos;
         at = name.find("layers.", at + 1)) {
        if (at > 0 && name[at - 1] != '.' && name[at - 1] != '/')
            continue;
        size_t i = at + 7;
        int n = 0;
        while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - at < 16)
            n = n * 10 + (name[i++] - '0');
        if (i > at + 7 && i < name.size() && name[i] == '.') {
            stem = name.substr(0, at + 7);
            return n;
        }
    }
    return -1;
}

std::optional<QuantizedKeys> mxfp4KeysOf(std::string_view name)
{
    // transformers' GptOssExperts (dequantized) against Mxfp4GptOssExperts (as shipped).
    for (std::string_view proj : {".experts.gate_up_proj", ".experts.down_proj"})
        if (name.ends_with(proj))
            return QuantizedKeys{std::string(name) + "_blocks", std::string(name) + "_scales"};
    return std::nullopt;
}

std::vector<int64_t> mxfp4DenseShape(std::span<const int64_t> blocks,
                                     std::span<const int64_t> scales)
{
    const size_t n = blocks.size();
    if (n < 3 || scales.size() + 1 != n || blocks[n - 1] != 16 ||
        !std::equal(scales.begin(), scales.end(), blocks.begin()))
        return {};
    std::vector<int64_t> out(blocks.begin(), blocks.end() - 3);
    out.push_back(blocks[n - 2] * 32);
    out.push_back(blocks[n - 3]);
    return out;
}

} // namespace shardscope::detail
