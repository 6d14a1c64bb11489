// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/result.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** One section of a fused parameter: the unfused parameter it stands for, and its size. */
struct FusedSection
{
    std::string name; ///< full name of the unfused parameter ("…linear_q_down_proj.weight")
    int64_t size = 0; ///< along Fusion::dim, full (TP-unsharded) units
    bool operator==(const FusedSection &) const = default;
};

/** How a fused parameter is made of its sections. See docs/layout-format.md. */
struct Fusion
{
    std::string rule; ///< the rule that splits it: swiglu, mla_down_proj, gdn
    int dim = 0;
    std::vector<FusedSection> sections;
    /** TP ranks hold [s1_r; s2_r; …]: the global tensor interleaves the sections by rank. */
    bool tpInterleaved = false;
    /** The parameter's shape is already TP-local (Megatron-Bridge writes GDN tensors so). */
    bool tpLocal = false;
    bool operator==(const Fusion &) const = default;
};

/** A parameter (or persistent buffer) the model expects, by its live module name. */
struct LayoutParam
{
    std::string name;           ///< "decoder.layers.0.self_attention.linear_qkv_down_proj.weight"
    std::vector<int64_t> shape; ///< full (TP-unsharded) shape
    std::string dtype;          ///< torch's name of the dtype the load asks for
    int tpDim = -1;             ///< TP partition dim; -1 = replicated over TP
    std::optional<Fusion> fusion;
    /** A norm absorbed into a fused linear (`layer_norm_weight`): the unfused norm's name. */
    std::string absorbs;
    int expert = -1;               ///< expert index as the name spells it; -1 = not an expert
    bool hasOptimizerState = true; ///< false for buffers (router expert_bias)
};

struct ParallelConfig
{
    int tp = 1, pp = 1, ep = 1, etp = 1, dpShard = 1;
    /** Decoder layers on the first and last pipeline stages (Megatron's
     *  --decoder-first/last-pipeline-num-layers); 0 = the stages share the layers evenly. */
    int firstStageLayers = 0, lastStageLayers = 0;
};

/** What a model expects from a checkpoint. Serialised as JSON, schema shardscope.layout/1. */
struct Layout
{
    std::string family; ///< llama, deepseek_v3, qwen3_next, … (informational)
    std::string source; ///< where it came from (config file, live model)
    ParallelConfig parallel;
    int numExperts = 0;        ///< routed experts per MoE layer (global)
    bool expertsGlobal = true; ///< expert indices in names are global (else EP-local)
    std::string mtpInner = "mtp_model_layer"; ///< the live name of MTP's inner layer
    /**
     * Built with Transformer Engine: each TE module (core_attention, linear_qkv, linear_proj,
     * linear_fc1, linear_fc2, MLA's linears) also asks for its `_extra_state` (FP8 metadata):
     * a key in legacy torch and torch.save state dicts, a ShardedObject `…/shard_i_n` in
     * torch_dist; fsdp_dtensor drops them on save and load (docs/formats.md §6.9).
     */
    bool transformerEngine = false;
    /**
     * Megatron's own linears (ColumnParallelLinear, RowParallelLinear) also keep an `_extra_state`
     * "for compatibility with TE state dict": a Megatron model built with the local spec asks for
     * the linears' extra state too (not core_attention's). Set for layouts generated from a
     * config; false for other models (Hugging Face's have none).
     */
    bool linearExtraState = false;
    /** Optimizer states saved per parameter; the first ones are split with the parameter. */
    std::vector<std::string> optimizerStates = {"exp_avg", "exp_avg_sq"};
    bool optimizerStep = true; ///< a per-parameter `step` (copied, not split)
    /**
     * How each checkpoint format names decoder layers under pipeline parallelism: "global"
     * (torch_dist: sharded_state_dict adds each stage's offset) or "stage_local" (Megatron-FSDP's
     * fsdp_dtensor: every stage saves and asks for decoder.layers.0…n-1, NVIDIA/Megatron-LM#7452).
     */
    std::map<std::string, std::string> ppLayerNames = {{"fsdp_dtensor", "stage_local"},
                                                       {"torch_dist", "global"}};
    /**
     * How megatron-core's torch_dist load asks for decoder layers (TransformerBlock's
     * sharded_state_dict): Stacked, one key per parameter with a layer axis
     * (`decoder.layers.<name>` [L, …], a homogeneous block), or PerLayer, a key per layer
     * (`decoder.layers.<i>.<name>`: non_homogeneous_layers, forced by moe_layer_freq given as a
     * list or > 1, linear_attention_freq, heterogeneous block specs,
     * hetereogenous_dist_checkpoint). Unknown: the layout does not say; the diff then assumes
     * the checkpoint's own form and says so (docs/formats.md §5.3.2).
     */
    /**
     * Names that are one tensor (tied weights: an output layer sharing its embedding), each
     * group in the order the model's state_dict() lists them, which is the order
     * load_state_dict fills them in: the last stored one decides the tensor's values. A name
     * that is not a param is one the model does not ask for apart (Megatron's tied output
     * layer, which has no weight of its own).
     */
    std::vector<std::vector<std::string>> ties;
    enum class LayerKeys : uint8_t { Unknown, Stacked, PerLayer };
    LayerKeys torchDistLayers = LayerKeys::Unknown;
    std::string torchDistLayersWhy; ///< what in the model decides it ("moe_layer_freq is a list")
    std::vector<LayoutParam> params;
};

/** The decoder layer index a live name holds (decoder.layers.<i>.…), or -1. */
int decoderLayerOf(const std::string &name);
/**
 * One past each pipeline stage's last decoder layer, as Megatron splits them: the first and last
 * stages' counts when given, the rest evenly; an error when they do not divide.
 */
Result<std::vector<int>> decoderStageEnds(const Layout &layout);
/** Whether `format` (formatName()) names decoder layers per stage under the layout's PP. */
bool stageLocalLayerNames(const Layout &layout, std::string_view format);

Result<Layout> readLayout(const std::string &path);
Result<Layout> layoutFromJson(const std::string &text, const std::string &origin);
std::string layoutToJson(const Layout &layout);

/** Options for generating a layout from a model config without building the model. */
struct LayoutOptions
{
    ParallelConfig parallel;
    /** `parallel` was chosen; otherwise Megatron arguments' own sizes (the saving run's
     *  tensor/pipeline/expert parallel sizes) are used where they are given. */
    bool parallelGiven = false;
    /** Default: fused for a Hugging Face config (what Megatron-Bridge builds), the arguments'
     *  mla_down_proj_fusion for Megatron arguments (off unless given). */
    std::optional<bool> mlaDownProjFusion;
    /**
     * MLA without a query LoRA (q_lora_rank null): a query norm fused into linear_q_proj
     * (`linear_q_proj.layer_norm_weight`), as Megatron's TE spec builds it under qk_layernorm
     * (mla_qk_norm_config.py; what Megatron-Bridge's DeepSeek providers set, NVIDIA-NeMo/
     * Megatron-Bridge#5261). Default: built with Transformer Engine and qk_layernorm; false: the
     * plain linear_q_proj (Megatron-Bridge after #5262, or qk_layernorm off).
     */
    std::optional<bool> mlaQueryNorm;
    bool sequentialExperts = false; ///< local_experts.<e>.… instead of TE grouped weight<e>
    /**
     * The Megatron-Core version that builds the model: "0.16" (and older releases) has neither
     * the fused MLA down projection nor linear_q_proj's fused query norm; "main" (default, the
     * development branch after 0.16) has both.
     */
    std::string megatronVersion = "main";
    /** dtype the load asks for; default float32 (fsdp_dtensor saves fp32 main params), or the
     *  args' bf16/fp16 when generated from a non-fsdp_dtensor checkpoint's own arguments. */
    std::optional<std::string> dtype;
    bool gdnTpLocal = false; ///< GDN in_proj/conv1d shapes already TP-local
    /** Experts named with EP-local indices (one EP rank's model: 0 … experts/ep - 1). */
    bool localExperts = false;
};

/**
 * A layout from a Hugging Face config.json (Llama/Qwen/Mistral-style GQA, DeepSeek-V2/V3,
 * Qwen3-Next) or a Megatron argument set (JSON of argparse names, or `--flag value` text).
 */
Result<Layout> layoutFromConfig(const std::string &path, const LayoutOptions &options);

} // namespace shardscope
