// SPDX-License-Identifier: MIT
// Causes that the keys as a whole show, not one parameter's: a prefix on every key, an output
// layer saved tied, buffers a model recomputes, vocabulary padding, quantized expert blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail {

/** A prefix that the checkpoint's keys carry and the model's names do not, or the reverse. */
struct KeyPrefix
{
    std::string prefix; ///< with its trailing dot: "model."
    bool stored = true; ///< true: on the stored keys (strip it); false: on the model's (add it)
    size_t matches = 0; ///< names it explains
    /** The stored key the model's `name` is saved under. */
    std::string storedName(std::string_view name) const;
};

/**
 * The one prefix that explains most of the model's names that are not stored as they are, when
 * it explains at least half of them (a prefix on every key, not a coincidence of a few).
 */
std::optional<KeyPrefix> commonKeyPrefix(std::span<const std::string_view> stored,
                                         std::span<const std::string_view> wanted);

/** The embedding whose tensor a tied output layer `name` shares, or empty when it is none. */
std::vector<std::string> tiedEmbeddingsOf(std::string_view name);

/**
 * For a stored key that no parameter asks for: why it is harmless when it is a buffer that
 * models recompute at init (rotary inv_freq, position_ids, causal masks), else empty.
 */
std::string recomputedBufferNote(std::string_view key);

/**
 * Rows that are vocabulary padding: `stored` is `want` rounded up to a multiple of some
 * power of two (Megatron's make_vocab_size_divisible_by × TP), or the reverse. The multiple,
 * or 0.
 */
int64_t vocabPaddingMultiple(int64_t stored, int64_t want);

/** A PEFT (LoRA) module keeps its original weight under base_layer: "…q_proj.weight" →
 *  "…q_proj.base_layer.weight". Empty for a name without a module. */
std::string peftBaseLayerName(std::string_view name);

/** A PEFT-wrapped model's name as the plain model spells it: "base_model.model." and
 *  ".base_layer" dropped. The name itself when it has neither. */
std::string peftPlainName(std::string_view name);

/** A LoRA adapter's own weight (lora_A, lora_B, their embedding forms, DoRA's magnitude). */
bool loraAdapterName(std::string_view name);

/**
 * For a parameter no stored key provides, under any name: when its name says which setting of
 * the model adds it (learned position embeddings, linear biases, a query/key norm), the fix
 * naming that setting as the model's framework spells it; empty otherwise.
 */
std::string addedBySettingFix(std::string_view name);

/** "…layers.<n>.…": n and the name up to "layers." (stem); -1 without a layer number. */
int layerOf(std::string_view name, std::string_view &stem);

/** The keys a quantized checkpoint keeps for a dense weight, and the format's name. */
struct QuantizedKeys
{
    std::string blocks, scales;
};

/**
 * gpt-oss's MXFP4 experts (transformers' Mxfp4GptOssExperts): `<name>_blocks` and
 * `<name>_scales` stand for the dequantized model's `<name>` (an expert block's gate_up_proj or
 * down_proj). Nullopt for any other name.
 */
std::optional<QuantizedKeys> mxfp4KeysOf(std::string_view name);

/**
 * The dense shape MXFP4 `blocks` [..., R, G, 16] and `scales` [..., R, G] dequantize to, as
 * transformers' convert_moe_packed_tensors gives it: [..., G × 32, R] (two values a byte, the
 * last two axes swapped). Empty when the shapes are not such a pair.
 */
std::vector<int64_t> mxfp4DenseShape(std::span<const int64_t> blocks,
                                     std::span<const int64_t> scales);

} // namespace shardscope::detail
