// SPDX-License-Identifier: MIT
#include "shardscope/diff.h"

#include "common/shapes.h"

#include <array>

namespace shardscope {

const std::vector<RuleInfo> &allRules()
{
    // Order matters only for listing; the diff applies them in Megatron's order (docs/formats.md
    // §6.1).
    static const std::vector<RuleInfo> rules = {
        {"wrapper_prefix",
         "model.module. / module. wrapper prefixes and optimizer.state.module.module.module. names",
         true},
        {"extra_state", "TE _extra_state entries are dropped on save and load", true},
        {"swiglu", "SwiGLU linear_fc1 [W; V] <-> weight_w / weight_v (GLU layers only)", true},
        {"mla_down_proj",
         "MLA linear_qkv_down_proj <-> linear_q_down_proj + linear_kv_down_proj, absorbed "
         "layer_norm_weight <-> input_layernorm.weight (Megatron-LM #6271)",
         true},
        {"gdn",
         "Gated DeltaNet in_proj / conv1d <-> .query/.key/.value/.z/.beta/.alpha, TP-local "
         "tensors included (wired by the Megatron-Bridge fix)",
         true},
        {"torch_dist_stacked",
         "torch_dist: a homogeneous block's layers stacked under one key (decoder.layers.x "
         "[L, …]); off: the per-layer request of a block that is not homogeneous (experts stay "
         "stacked, mlp.experts.experts.linear_fcN.weight [E, …], unless the checkpoint says "
         "singleton_local_shards)",
         true},
        {"experts_global",
         "EP-local expert indices (an EP-local layout) <-> global indices on disk "
         "(handle_experts_in_state_dict)",
         true},
        {"mtp", "MTP inner layer mtp_model_layer (live) <-> transformer_layer (on disk)", true},
        {"local_spec_keys_map",
         "torch_dist of Megatron's local spec: input_layernorm / pre_mlp_layernorm stored under "
         "the TE names self_attention.linear_qkv.layer_norm_* / mlp.linear_fc1.layer_norm_* "
         "(the spec's sharded_state_dict_keys_map)",
         true},
        {"mtp_spelling",
         "MTP checkpoints spelled mtp_model_layer on disk (converter output, saves before #6271)",
         false},
        {"experts_form",
         "grouped experts (linear_fc1.weight<e>) <-> sequential "
         "(local_experts.<e>.linear_fc1.weight)",
         false},
        {"saved_prefix",
         "keys saved through a wrapper: DDP's module., torch.compile's _orig_mod., FSDP's "
         "_fsdp_wrapped_module., checkpoint_wrapper's _checkpoint_wrapped_module.",
         false},
        {"key_prefix",
         "a prefix added or removed on every key (a base model's state dict in a model that "
         "wraps it under model., or the reverse)",
         false},
        {"tied_output",
         "an output layer saved tied to the embedding (stored once) for a model that unties them "
         "(tie_word_embeddings: false, --untie-embeddings-and-output-weights)",
         false},
        {"optimizer_index",
         "DCP optimizer state saved by position (a raw optimizer.state_dict(): "
         "optimizer.state.<i>.exp_avg) for a load by name (get_optimizer_state_dict), position "
         "i the model's i-th parameter",
         false},
        {"peft_base_layer",
         "a PEFT-wrapped model's names (base_model.model. and each LoRA module's base_layer.) "
         "for a checkpoint of the base model",
         false},
        {"fused_on_disk",
         "tensors stored fused (saved without a split handler) cut into the parameters a model "
         "keeps apart, or taken whole by a fused parameter",
         false},
    };
    return rules;
}

std::string_view strictnessName(Strictness s)
{
    static constexpr std::array names = {
        "assume_ok_unexpected", "log_unexpected", "log_all",   "raise_unexpected", "raise_all",
        "return_unexpected",    "return_all",     "ignore_all"};
    return names[size_t(s)];
}

std::optional<Strictness> strictnessFromName(std::string_view name)
{
    for (int i = 0; i <= int(Strictness::IgnoreAll); ++i)
        if (strictnessName(Strictness(i)) == name)
            return Strictness(i);
    return std::nullopt;
}

std::string_view statusName(LoadStatus s)
{
    static constexpr std::array names = {"ok",         "split",          "merge",   "rename",
                                         "cast",       "shape_mismatch", "partial", "unloadable",
                                         "unreadable", "wrong_source"};
    return names[size_t(s)];
}

std::string_view actionName(LoadOutcome::Action a)
{
    static constexpr std::array names = {"loads", "raises", "logs_and_continues",
                                         "returns_and_continues", "silent"};
    return names[size_t(a)];
}

std::string_view changeName(KeyChange::Kind k)
{
    static constexpr std::array names = {"added", "removed", "renamed", "shape_changed",
                                         "dtype_changed"};
    return names[size_t(k)];
}

bool isLoadProblem(const DiffEntry &e)
{
    if (!e.realLoadFills || e.wrongSource)
        return true;
    switch (e.status) {
    case LoadStatus::Ok:
    case LoadStatus::Split:
    case LoadStatus::Merge:
    case LoadStatus::Rename:
        return false;
    case LoadStatus::Cast: { // a widening cast, or one measured to change no value: harmless
        if (!e.narrowing)
            return false;
        // Measured over every element: a source that could not be read leaves it unmeasured.
        return !(e.castLoss && e.castLoss->changed == 0 &&
                 e.castLoss->count >= detail::product(e.shape));
    }
    default:
        return true;
    }
}

bool DiffResult::clean() const
{
    if (outcome.action != LoadOutcome::Action::Loads)
        return false;
    for (const DiffEntry &e : entries)
        if (!e.realLoadFills)
            return false;
    // Model tensors nobody asks for: a load ignores them silently (a layer or expert too many?).
    for (const UnconsumedKey &u : unconsumed)
        if (u.tensor && !u.redundant && !u.key.starts_with("optimizer."))
            return false;
    return true;
}

bool CheckpointDiff::clean() const
{
    for (const KeyChange &c : changes)
        if (c.kind != KeyChange::Kind::Renamed)
            return false;
    return true;
}

} // namespace shardscope
