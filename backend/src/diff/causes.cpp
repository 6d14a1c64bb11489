// SPDX-License-Identifier: MIT
#include "diff/causes.h"

#include "common/shapes.h"
#include "diff/namedcauses.h"

#include <cctype>

namespace shardscope::detail {

namespace {

bool has(std::string_view name, std::string_view part)
{
    return name.find(part) != std::string_view::npos;
}

bool hasAny(std::string_view name, std::initializer_list<std::string_view> parts)
{
    for (std::string_view p : parts)
        if (has(name, p))
            return true;
    return false;
}

// Whose names the parameter has: the settings are named the way that framework spells them.
enum class Naming { Megatron, HuggingFace, Torchtitan };

Naming namingOf(std::string_view name)
{
    // Megatron's module names, or its top-level decoder (legacy rank files: <dir>/model.decoder…);
    // BART-like Hugging Face models have a decoder too, with self_attn.
    if (hasAny(name,
               {"self_attention.", "linear_qkv", "linear_fc", "linear_proj", "word_embeddings",
                "output_layer", "final_layernorm", "pre_mlp_layernorm", "embedding.position"}) ||
        ((name.starts_with("decoder.") || has(name, "/model.decoder.")) &&
         !has(name, "self_attn.")))
        return Naming::Megatron;
    if (hasAny(name, {"tok_embeddings", ".attention.w", ".feed_forward.", "attention_norm",
                      "ffn_norm"}) ||
        name == "output.weight")
        return Naming::Torchtitan;
    return Naming::HuggingFace;
}

// What one dimension of a weight counts, by the module it belongs to.
enum class Size {
    Unknown,
    Vocab,
    Hidden,
    Ffn,       // the dense MLP's inner size
    MoeFfn,    // a routed expert's
    SharedFfn, // the shared experts'
    QueryRows, // query heads × head size
    KvRows,    // key/value heads (query groups) × head size
    QkvRows,   // (query heads + 2 × query groups) × head size, in one fused projection
    HeadDim,   // one head's size (a query/key norm)
    Experts,
};

bool vocabName(std::string_view name)
{
    return hasAny(name, {"word_embeddings", "output_layer", "embed_tokens", "lm_head",
                         "tok_embeddings", "wte."}) ||
           name.ends_with("output.weight");
}

// The setting that sizes dimension `d` of a parameter of `rank` dimensions named `name`.
Size sizeOf(std::string_view name, size_t rank, size_t d)
{
    const bool routed = has(name, "experts.") && !has(name, "shared_expert");
    const bool shared = has(name, "shared_expert");
    const Size ffn = routed ? Size::MoeFfn : shared ? Size::SharedFfn : Size::Ffn;
    if (vocabName(name) && rank == 2)
        return d == 0 ? Size::Vocab : Size::Hidden;
    if (rank == 3 && routed)
        return d == 0 ? Size::Experts : Size::Unknown; // fused experts: orientations differ
    if (hasAny(name,
               {"mlp.router.", "mlp.gate.weight", "block_sparse_moe.gate.", "moe.router.gate."}))
        return d == 0 ? Size::Experts : Size::Hidden;
    if (rank == 1 && hasAny(name, {"expert_bias", "e_score_correction_bias"}))
        return Size::Experts;
    if (rank == 1 && hasAny(name, {"q_layernorm", "k_layernorm", "q_norm.", "k_norm."}))
        return Size::HeadDim;
    // A norm fused into the linear after it (TE's layer_norm_weight) normalises its input.
    if (rank == 1 && has(name, "layer_norm_") &&
        hasAny(name, {"linear_qkv.", "linear_fc1.", "linear_q_proj.", "linear_q_down_proj."}))
        return Size::Hidden;
    if (rank == 1 && hasAny(name, {"norm", "ln_"}) && !hasAny(name, {"kv_", "q_a_", "kv_a_"}))
        return Size::Hidden;
    // Projections: [out, in] (torch's Linear), a bias along out.
    const bool bias = rank == 1;
    if (rank > 2)
        return Size::Unknown;
    auto pick = [&](Size out, Size in) { return bias || d == 0 ? out : in; };
    if (hasAny(name, {"linear_qkv.", "qkv_proj.", "query_key_value.", "c_attn.", "Wqkv."}))
        return pick(Size::QkvRows, Size::Hidden);
    if (hasAny(name, {"q_proj.", ".attention.wq.", ".linear_q_proj."}))
        return pick(Size::QueryRows, Size::Hidden);
    if (hasAny(name, {"k_proj.", "v_proj.", ".attention.wk.", ".attention.wv."}))
        return pick(Size::KvRows, Size::Hidden);
    if (hasAny(name,
               {"linear_proj.", "o_proj.", ".attention.wo.", "attn.c_proj.", "attention.dense."}))
        return pick(Size::Hidden, Size::QueryRows);
    if (hasAny(name, {"linear_fc1.", "gate_proj.", "up_proj.", "feed_forward.w1.",
                      "feed_forward.w3.", "mlp.fc1.", "mlp.c_fc.", "dense_h_to_4h.", "w1.", "w3."}))
        return pick(ffn, Size::Hidden);
    if (hasAny(name, {"linear_fc2.", "down_proj.", "feed_forward.w2.", "mlp.fc2.", "mlp.c_proj.",
                      "dense_4h_to_h.", "w2."}))
        return pick(Size::Hidden, ffn);
    return Size::Unknown;
}

// "12 entries", "64 rows", "32 columns", "4 along dimension 0".
std::string extent(int64_t n, size_t rank, size_t d)
{
    const std::string v = std::to_string(n);
    if (rank == 1)
        return v + (n == 1 ? " entry" : " entries");
    if (rank == 2)
        return v + (d == 0 ? (n == 1 ? " row" : " rows") : (n == 1 ? " column" : " columns"));
    return v + " along dimension " + std::to_string(d);
}

// What the size is, in words.
std::string_view what(Size s)
{
    switch (s) {
    case Size::Vocab:
        return "the vocabulary size";
    case Size::Hidden:
        return "the hidden size";
    case Size::Ffn:
        return "the MLP's inner (FFN) size";
    case Size::MoeFfn:
        return "each expert's inner (FFN) size";
    case Size::SharedFfn:
        return "the shared experts' inner size";
    case Size::QueryRows:
        return "the attention's query heads × head size";
    case Size::KvRows:
        return "the attention's key/value heads × head size";
    case Size::QkvRows:
        return "the attention's heads, query groups or head size";
    case Size::HeadDim:
        return "the attention's head size";
    case Size::Experts:
        return "the number of experts";
    case Size::Unknown:
        break;
    }
    return "a size";
}

// The setting that gives this size `value` in the saving run, as `naming` spells it.
std::string setting(Size s, Naming naming, int64_t value, std::string_view name, size_t d)
{
    const std::string v = std::to_string(value);
    const bool gatedRows = s == Size::Ffn || s == Size::MoeFfn || s == Size::SharedFfn;
    // Megatron's linear_fc1 holds SwiGLU's gate and up projections together: twice the rows.
    const bool fc1 = gatedRows && has(name, "linear_fc1") && d == 0;
    const std::string half = value % 2 == 0 ? std::to_string(value / 2) : std::string();
    switch (naming) {
    case Naming::Megatron:
        switch (s) {
        case Size::Hidden:
            return "--hidden-size " + v;
        case Size::Ffn:
        case Size::MoeFfn:
        case Size::SharedFfn: {
            const std::string flag = s == Size::Ffn      ? "--ffn-hidden-size"
                                     : s == Size::MoeFfn ? "--moe-ffn-hidden-size"
                                                         : "--moe-shared-expert-intermediate-size";
            if (fc1 && !half.empty())
                return flag + " " + half +
                       " with --swiglu (linear_fc1 holds the gate and up "
                       "projections together), or " +
                       flag + " " + v + " without";
            return flag + " " + v;
        }
        case Size::QueryRows:
            return "--num-attention-heads × --kv-channels = " + v;
        case Size::KvRows:
            return "--num-query-groups × --kv-channels = " + v;
        case Size::QkvRows:
            return "(--num-attention-heads + 2 × --num-query-groups) × --kv-channels = " + v;
        case Size::HeadDim:
            return "--kv-channels " + v;
        case Size::Experts:
            return "--num-experts " + v;
        default:
            return {};
        }
    case Naming::HuggingFace:
        switch (s) {
        case Size::Hidden:
            return "hidden_size " + v;
        case Size::Ffn:
            return "intermediate_size " + v;
        case Size::MoeFfn:
            return "moe_intermediate_size " + v + " (intermediate_size in Mixtral and gpt-oss)";
        case Size::SharedFfn:
            return "shared_expert_intermediate_size " + v;
        case Size::QueryRows:
            return "num_attention_heads × head_dim = " + v;
        case Size::KvRows:
            return "num_key_value_heads × head_dim = " + v;
        case Size::QkvRows:
            return "(num_attention_heads + 2 × num_key_value_heads) × head_dim = " + v;
        case Size::HeadDim:
            return "head_dim " + v;
        case Size::Experts:
            return "num_local_experts " + v +
                   " (num_experts in Qwen-MoE, n_routed_experts in "
                   "DeepSeek)";
        default:
            return {};
        }
    case Naming::Torchtitan:
        switch (s) {
        case Size::Hidden:
            return "dim " + v;
        case Size::Ffn:
        case Size::MoeFfn:
        case Size::SharedFfn:
            return "multiple_of and ffn_dim_multiplier that give " + v;
        case Size::QueryRows:
            return "n_heads × head size = " + v;
        case Size::KvRows:
            return "n_kv_heads × head size = " + v;
        case Size::QkvRows:
        case Size::HeadDim:
            return "n_heads, n_kv_heads and dim that give " + v;
        case Size::Experts:
            return "num_experts " + v;
        default:
            return {};
        }
    }
    return {};
}

// Where the saving run's settings are, for that framework.
std::string whereSaved(Naming naming)
{
    switch (naming) {
    case Naming::Megatron:
        return " (`shardscope-cli layout --from-config` on the checkpoint reads the saved "
               "arguments)";
    case Naming::HuggingFace:
        return " (the checkpoint's config.json has it)";
    case Naming::Torchtitan:
        return " (the model flavor of the saving run's job config)";
    }
    return {};
}

std::string vocabFix(std::string_view name, int64_t s, int64_t w, Naming naming)
{
    const std::string rows = " rows in the checkpoint and " + std::to_string(w) + " in the model";
    const std::string hfVocab = naming == Naming::HuggingFace  ? "vocab_size"
                                : naming == Naming::Torchtitan ? "vocab_size (from the tokenizer)"
                                                               : "--vocab-size";
    if (const int64_t m = vocabPaddingMultiple(s, w); m && s > w)
        return "The vocabulary is padded in the checkpoint: " + std::string(name) + " has " +
               std::to_string(s) + rows + ", and " + std::to_string(s) + " is the tokenizer's " +
               std::to_string(w) + " rounded up to a multiple of " + std::to_string(m) +
               " (Megatron pads to --make-vocab-size-divisible-by × "
               "--tensor-model-parallel-size). The first " +
               std::to_string(w) +
               " rows are the tokenizer's: keep them (tensor[:" + std::to_string(w) +
               "]) and drop the " + std::to_string(s - w) +
               " padding rows, or build the model with the padded size (" + hfVocab + " " +
               std::to_string(s) + ").";
    if (const int64_t m = vocabPaddingMultiple(s, w); m && w > s)
        return "The model pads the vocabulary and the checkpoint does not: " + std::string(name) +
               " has " + std::to_string(s) + rows + ", a multiple of " + std::to_string(m) +
               " (Megatron pads to --make-vocab-size-divisible-by × "
               "--tensor-model-parallel-size). Append " +
               std::to_string(w - s) +
               " padding rows (no token looks them up), or build the model with a "
               "--make-vocab-size-divisible-by that pads to " +
               std::to_string(s) + ".";
    return "The vocabulary size differs: " + std::string(name) + " has " + std::to_string(s) +
           rows +
           ". The saving run's tokenizer, or its padding (Megatron: "
           "--make-vocab-size-divisible-by × --tensor-model-parallel-size), gave " +
           std::to_string(s) + ": build the model with " + hfVocab + " " + std::to_string(s) +
           whereSaved(naming) +
           ", or, if the tokenizer changed on purpose, resize the embedding "
           "to " +
           std::to_string(w) + " rows.";
}

} // namespace

std::string shapeMismatchFix(const std::string &name, std::span<const int64_t> stored,
                             const std::vector<int64_t> &want, int tpDim, int tp)
{
    const Naming naming = namingOf(name);
    const std::string from = whereSaved(naming);
    // DeepSpeed ZeRO-3 keeps each parameter's shard in ds_tensor and leaves param.data an empty
    // torch.Size([0]) (partition_parameters.py's free_param): module.state_dict() saved without
    // gathering writes those placeholders (huggingface/transformers#20082).
    if (stored.size() == 1 && stored[0] == 0 && product(want) > 0)
        return "The checkpoint holds torch.Size([0]) where the model has " + shapeText(want) +
               ": a DeepSpeed ZeRO-3 placeholder. ZeRO-3 partitions every parameter over the "
               "data-parallel ranks and leaves the module's own tensor empty, and this state "
               "dict was saved without gathering them (huggingface/transformers#20082). Rebuild "
               "the full weights from the DeepSpeed checkpoint directory (global_step*/ with its "
               "*_optim_states.pt partitions) with the zero_to_fp32.py DeepSpeed saves beside "
               "it (python zero_to_fp32.py CHECKPOINT_DIR OUTPUT_DIR, or "
               "deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint), and "
               "save gathered weights from now on: \"stage3_gather_16bit_weights_on_model_save\": "
               "true under zero_optimization (Trainer and accelerate then save full tensors), or "
               "state_dict() inside deepspeed.zero.GatheredParameters.";
    if (stored.size() != want.size())
        return "The checkpoint stores it with " + std::to_string(stored.size()) + " dimensions " +
               shapeText(stored) + ", the model asks for " + std::to_string(want.size()) + " " +
               shapeText(want) +
               ": one side stacks layers or experts in one tensor and the other does not. Load "
               "with the loader that stacks and unstacks them (torch_dist's sharded state dict), "
               "or convert the checkpoint to the model's form.";
    std::vector<size_t> diff;
    for (size_t d = 0; d < stored.size(); ++d)
        if (stored[d] != want[d])
            diff.push_back(d);
    if (diff.empty())
        return {};
    const size_t rank = stored.size();
    // TP-local shards of another TP size: the ratio along the partition dim is the TP ratio.
    if (diff.size() == 1 && tpDim >= 0 && diff.front() == size_t(tpDim) && stored[diff[0]] > 0 &&
        want[diff[0]] > 0 && (want[diff[0]] * tp) % stored[diff[0]] == 0) {
        const size_t d = diff.front();
        const int64_t s = stored[d], w = want[d];
        const int64_t saved = (w * tp) / s;
        if (saved > 0 && saved != tp)
            return "The checkpoint was saved with --tensor-model-parallel-size " +
                   std::to_string(saved) + " and this model is built with " + std::to_string(tp) +
                   ": each rank file holds 1/" + std::to_string(saved) + " of it, " +
                   extent(s, rank, d) + " where a rank of this model holds " + std::to_string(w) +
                   ". Load with --tensor-model-parallel-size " + std::to_string(saved) +
                   ", or convert the checkpoint to the new size (Megatron's "
                   "tools/checkpoint/convert.py --target-tensor-parallel-size " +
                   std::to_string(tp) + ").";
    }
    // The first differing dimension whose size a setting names; the rest are said after it.
    size_t d = diff.front();
    Size size = Size::Unknown;
    for (size_t x : diff)
        if (const Size s = sizeOf(name, rank, x); s != Size::Unknown) {
            d = x;
            size = s;
            break;
        }
    const int64_t s = stored[d], w = want[d];
    std::string also;
    for (size_t x : diff)
        if (x != d)
            also += (also.empty() ? " Dimension " : "; dimension ") + std::to_string(x) +
                    " differs too (" + std::to_string(stored[x]) + " against " +
                    std::to_string(want[x]) + ").";
    if (size == Size::Vocab)
        return vocabFix(name, s, w, naming) + also;
    // SwiGLU keeps [W; V] in linear_fc1: twice the rows with the same FFN size.
    if (diff.size() == 1 && d == 0 && has(name, "linear_fc1") && (s == 2 * w || w == 2 * s))
        return std::string("linear_fc1 has ") + (s == 2 * w ? "twice" : "half") +
               " the rows the model asks for (" + std::to_string(s) + " in the checkpoint, " +
               std::to_string(w) +
               " in the model): one side's MLP is gated (SwiGLU keeps its "
               "gate and up projections together in linear_fc1) and the other's is not. Build "
               "the model " +
               (s == 2 * w ? "with" : "without") + " --swiglu, as the saving run was" + from + ".";
    const std::string counted = " has " + extent(s, rank, d) + " in the checkpoint and " +
                                std::to_string(w) + " in the model";
    if (size != Size::Unknown) {
        std::string text(what(size));
        text[0] = char(std::toupper(static_cast<unsigned char>(text[0])));
        return text + " differs: " + name + counted + ". The saving run had " +
               setting(size, naming, s, name, d) + "; build the model with it" + from + "." + also;
    }
    return "The checkpoint stores " + name + " as " + shapeText(stored) +
           " and the model asks for " + shapeText(want) + " (dimension " + std::to_string(d) +
           ": " + std::to_string(s) + " against " + std::to_string(w) +
           (diff.size() > 1 ? ", and " + std::to_string(diff.size() - 1) + " more" : "") +
           "): the model is built with other sizes than the run that saved it. Build it with "
           "the saving run's settings" +
           from + ".";
}

} // namespace shardscope::detail
