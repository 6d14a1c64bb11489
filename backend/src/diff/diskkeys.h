// SPDX-License-Identifier: MIT
// A checkpoint's keys sorted into the model and optimizer sections by their wrappers: what the
// diff looks parameters up in.
#pragma once

#include "shardscope/checkpoint.h"

#include "common/flatmap.h"

#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardscope::detail {

extern const std::set<std::string> kKnownStates;

// Checkpoint keys, sorted into the model and optimizer sections by their wrappers. Keys are
// views into the CheckpointIndex; the maps hash name views (DeepSeek-V3 has 650,000 keys).
struct DiskKey
{
    std::string_view key;
    const TensorEntry *tensor = nullptr;
    const ObjectEntry *object = nullptr;
    bool used = false;
    bool requested = false; // the real load asks for it by this name (present: not unexpected)
    const Problem *problem = nullptr; // what a load of it meets: holes or unreadable data
};

struct Disk
{
    std::vector<DiskKey> keys;
    FlatStringMap model{1 << 16};               // live-style name → key
    FlatStringMap optNameFirst{1 << 16};        // "<name>.<state>" → key (fsdp_dtensor)
    FlatStringMap optStateFirst{1 << 4};        // "<state>.<name>" → key (torch_dist)
    std::string modelWrapper, optimizerWrapper; // as seen, for request keys
    // optimizer.param_to_group_meta.<wrapper><live name>.<hyperparameter> → first key index
    std::unordered_map<std::string_view, uint32_t> groupMeta;
    bool paramGroups = false;   // optimizer.param_groups (torch_dist common state, converter)
    std::string mainParamState; // torch_dist: "param" or "fp32_param" when stored
    bool megatronWrapped = false;
    /** DeepSpeed's model states file (engine.py's _common_checkpoint_state): the module's state
     *  dict is its `module` entry, beside ds_config, param_shapes and the training counters. */
    bool deepspeed = false;
    /** DeepSpeed's param_shapes (the full shape of each parameter its optimizer partitions), by
     *  the parameter's name. */
    std::unordered_map<std::string_view, std::vector<int64_t>> deepspeedShapes;
    /** Keys of the model's state dict (tensors, and DCP objects) by index into `keys`. */
    std::vector<uint32_t> modelKeys;

    DiskKey *at(uint32_t i) { return i == FlatStringMap::kAbsent ? nullptr : &keys[i]; }
    DiskKey *findModel(std::string_view name) { return at(model.find(name)); }
    /** `scratch`: the caller's (lookups run on several threads at once). */
    DiskKey *findOptimizer(std::string_view name, std::string_view state, std::string &scratch)
    {
        scratch.assign(name).append(".").append(state);
        if (DiskKey *k = at(optNameFirst.find(scratch)))
            return k;
        if (optStateFirst.size() == 0)
            return nullptr;
        scratch.assign(state).append(".").append(name);
        return at(optStateFirst.find(scratch));
    }
};

/** `model.module.x`, `model0.module.x`, `module.x` → the wrapper's length. */
size_t modelWrapperLength(std::string_view k);
/**
 * Fills `d` from the index; `stripWrappers`: the wrapper_prefix rule is on; `literalNames`: the
 * keys are the model's names as they are (a flat state dict), whatever their prefix.
 */
void sortKeys(const CheckpointIndex &index, bool stripWrappers, Disk &d, bool literalNames = false);

} // namespace shardscope::detail
