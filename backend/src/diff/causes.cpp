// SPDX-License-Identifier: MIT
#include "diff/causes.h"

#include "common/shapes.h"
#include "diff/namedcauses.h"

namespace shardscope::detail {

namespace {

bool has(const std::string &name, const char *part)
{
    return name.find(part) != std::string::npos;
}

std::string numbers(int64_t stored, int64_t want)
{
    return "the checkpoint has " + std::to_string(stored) + ", the model " + std::to_string(want);
}

} // namespace

std::string shapeMismatchFix(const std::string &name, std::span<const int64_t> stored,
                             const std::vector<int64_t> &want, int tpDim, int tp)
{
    const std::string generic = " Generate the layout from the saving run's arguments (`layout "
                                "--from-config` on the checkpoint reads its saved args).";
    if (stored.size() != want.size())
        return "Stored with " + std::to_string(stored.size()) + " dimensions " + shapeText(stored) +
               ", asked for with " + std::to_string(want.size()) + " " + shapeText(want) +
               ": a stacked tensor (layers or experts in one key) on one side only; load with "
               "the loader that (un)stacks it (torch_dist's sharded state dict), or convert "
               "the checkpoint." +
               generic;
    std::vector<size_t> diff;
    for (size_t d = 0; d < stored.size(); ++d)
        if (stored[d] != want[d])
            diff.push_back(d);
    if (diff.empty())
        return {};
    const size_t d = diff.front();
    const int64_t s = stored[d], w = want[d];
    // TP-local shards of another TP size: the ratio along the partition dim is the TP ratio.
    if (diff.size() == 1 && tpDim >= 0 && d == size_t(tpDim) && s > 0 && w > 0 &&
        (w * tp) % s == 0) {
        const int64_t saved = (w * tp) / s;
        if (saved > 0 && saved * s == w * tp && saved != tp)
            return "The checkpoint's rank files hold shards of tensor-parallel size " +
                   std::to_string(saved) + " (this model: " + std::to_string(tp) + "; dim " +
                   std::to_string(d) + " is " + numbers(s, w) +
                   "): load with --tensor-model-parallel-size " + std::to_string(saved) +
                   ", or convert the checkpoint to the new TP size (tools/checkpoint/convert.py).";
    }
    const bool vocab = has(name, "word_embeddings") || has(name, "output_layer") ||
                       has(name, "embed_tokens") || has(name, "lm_head") ||
                       has(name, "tok_embeddings") || name.ends_with("output.weight") ||
                       has(name, "wte.");
    if (diff.size() == 1 && d == 0 && vocab) {
        if (const int64_t m = vocabPaddingMultiple(s, w); m && s > w)
            return "The checkpoint's " + std::to_string(s) +
                   " rows are the vocabulary padded: " + std::to_string(w) +
                   " rounded up to a multiple of " + std::to_string(m) +
                   " (Megatron pads to --make-vocab-size-divisible-by × TP), and the model asks "
                   "for the tokenizer's " +
                   std::to_string(w) + ". The first " + std::to_string(w) +
                   " rows are the tokenizer's: trim the last " + std::to_string(s - w) +
                   " padding rows (tensor[:" + std::to_string(w) +
                   "]), or build the model with the saving run's padded size.";
        if (const int64_t m = vocabPaddingMultiple(s, w); m && w > s)
            return "The model pads the vocabulary to " + std::to_string(w) +
                   " rows (a multiple of " + std::to_string(m) +
                   ": --make-vocab-size-divisible-by × TP), the checkpoint holds the "
                   "tokenizer's " +
                   std::to_string(s) + ": append " + std::to_string(w - s) +
                   " padding rows (they are never looked up), or build the model with "
                   "--make-vocab-size-divisible-by so that it pads to " +
                   std::to_string(s) + ".";
    }
    if (diff.size() == 1 && d == 0 && vocab)
        return "The vocabulary size differs (rows: " + numbers(s, w) +
               "): the padded vocabulary (--make-vocab-size-divisible-by with the TP size, "
               "or another tokenizer) is not the saving run's; pad or trim the embedding to " +
               std::to_string(w) + " rows, or build the model with the saved vocab size.";
    if (diff.size() == 1 && d == 0 && has(name, "linear_fc1") && (s == 2 * w || w == 2 * s))
        return std::string("linear_fc1 has ") + (s == 2 * w ? "twice" : "half") +
               " the rows the model asks for (" + numbers(s, w) +
               "): one side is gated (SwiGLU keeps [W; V] in linear_fc1) and the other not; "
               "build the model with the saving run's --swiglu setting.";
    if (stored.size() == 1 && (has(name, "norm") || has(name, "layer_norm")))
        return "The hidden size differs (" + numbers(s, w) +
               "): build the model with the saving "
               "run's --hidden-size." +
               generic;
    if (diff.size() == 1 && d == 0 &&
        (has(name, "linear_qkv.") || has(name, "q_proj") || has(name, "k_proj") ||
         has(name, "v_proj")))
        return "The attention projection's rows differ (" + numbers(s, w) +
               "): the heads, query groups or head dimension differ (--num-attention-heads, "
               "--num-query-groups, --kv-channels)." +
               generic;
    if (diff.size() == 1 &&
        (has(name, "linear_fc1") || has(name, "linear_fc2") || has(name, "gate_proj") ||
         has(name, "up_proj") || has(name, "down_proj")))
        return "The MLP's inner size differs (" + numbers(s, w) + " along dim " +
               std::to_string(d) +
               "): --ffn-hidden-size (or --moe-ffn-hidden-size for experts) "
               "is not the saving run's." +
               generic;
    return "Dimension " + std::to_string(d) + " is " + numbers(s, w) +
           (diff.size() > 1 ? " (and " + std::to_string(diff.size() - 1) + " more)" : "") +
           ": the model config differs from the run that saved the checkpoint." + generic;
}

} // namespace shardscope::detail
