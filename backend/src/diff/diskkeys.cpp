// SPDX-License-Identifier: MIT
#include "diff/diskkeys.h"

#include "shardscope/pyvalue.h"

#include <cctype>

namespace shardscope::detail {

const std::set<std::string> kKnownStates = {"exp_avg",    "exp_avg_sq", "step",        "param",
                                            "fp32_param", "main_param", "master_param"};

// `model.module.x`, `model0.module.x`, `module.x` → `x` (and the wrapper).
size_t modelWrapperLength(std::string_view k)
{
    size_t p = 0;
    if (k.starts_with("model")) {
        size_t q = 5;
        while (q < k.size() && std::isdigit(static_cast<unsigned char>(k[q])))
            ++q;
        if (q < k.size() && k[q] == '.')
            p = q + 1;
    }
    while (k.substr(p).starts_with("module."))
        p += 7;
    return p;
}

void sortKeys(const CheckpointIndex &index, bool stripWrappers, Disk &d, bool literalNames)
{
    d.keys.reserve(index.tensors.size() + index.objects.size());
    for (const TensorEntry &t : index.tensors)
        d.keys.push_back({t.key, &t, nullptr, false, {}});
    for (const ObjectEntry &o : index.objects)
        d.keys.push_back({o.key, nullptr, &o, false, {}});
    if (!index.problems.empty()) {
        // A key's problem that does the most to a load; notes do nothing to it.
        std::unordered_map<std::string_view, const Problem *> problems;
        for (const Problem &p : index.problems) {
            if (p.effect == Problem::Effect::Note)
                continue;
            auto [it, fresh] = problems.emplace(p.key, &p);
            if (!fresh && p.effect > it->second->effect)
                it->second = &p;
        }
        for (DiskKey &k : d.keys)
            if (auto it = problems.find(k.key); it != problems.end())
                k.problem = it->second;
    }
    // A flat state dict (safetensors, a torch.save of model.state_dict()) is loaded by its
    // names as they are: `model.` there is part of the name (Hugging Face's `model.layers.…`
    // beside `lm_head.weight`), not a wrapper. A torch.save of a training dict (`model`,
    // `optimizer`, `args`, …) nests the state dict under its entries.
    bool flat = literalNames || index.format == Format::Safetensors ||
                index.format == Format::SafetensorsIndex || index.format == Format::TorchSaveIndex;
    if (index.format == Format::TorchSave) {
        flat = true;
        for (const DiskKey &k : d.keys) {
            if (k.key.starts_with("optimizer.") || k.key == "args" || k.key == "iteration" ||
                k.key == "checkpoint_version" || k.key.starts_with("state_dict."))
                flat = false;
            if (k.key == "ds_version")
                d.deepspeed = true;
        }
    }
    if (d.deepspeed) {
        // Its `module` entry is what a load gives load_state_dict (torch.load(f)["module"]); the
        // rest is DeepSpeed's (param_shapes.<group>.<name> holds each parameter's full shape).
        for (uint32_t i = 0; i < uint32_t(d.keys.size()); ++i) {
            const std::string_view k = d.keys[i].key;
            if (k.starts_with("module.")) {
                d.model.insert(k.substr(7), i);
                if (d.keys[i].tensor)
                    d.modelKeys.push_back(i);
                continue;
            }
            const ObjectEntry *o = d.keys[i].object;
            if (!k.starts_with("param_shapes.") || !o || !o->value ||
                o->value->kind != PyValue::Kind::Tuple)
                continue;
            const size_t dot = k.find('.', 13);
            std::vector<int64_t> shape;
            for (const PyValue &v : o->value->items)
                if (v.kind == PyValue::Kind::Int)
                    shape.push_back(v.integer);
            if (dot != std::string_view::npos && shape.size() == o->value->items.size())
                d.deepspeedShapes.emplace(k.substr(dot + 1), std::move(shape));
        }
        d.modelWrapper = "module.";
        d.megatronWrapped = true; // what is not under `module.` is the training loop's
        d.optimizerWrapper = "optimizer.state.module.module.module.";
        return;
    }
    stripWrappers = stripWrappers && !flat;
    // torch_dist keys are Megatron's sharded keys: never under a wrapper.
    const bool literalModel = flat || index.format == Format::MegatronTorchDist;
    for (const DiskKey &k : d.keys)
        if (!literalModel && modelWrapperLength(k.key) > 0) {
            d.megatronWrapped = true;
            break;
        }

    for (uint32_t i = 0; i < uint32_t(d.keys.size()); ++i) {
        const std::string_view k = d.keys[i].key;
        if (k.starts_with("optimizer.state.")) {
            std::string_view rest = k.substr(16);
            // torch_dist spells optimizer.state.<state>.<name>; fsdp_dtensor the reverse.
            const size_t first = rest.find('.');
            if (stripWrappers && first != std::string_view::npos &&
                kKnownStates.count(std::string(rest.substr(0, first)))) {
                d.optStateFirst.insert(rest, i);
                const std::string_view state = rest.substr(0, first);
                if (state == "param" || state == "fp32_param")
                    d.mainParamState = std::string(state);
                continue;
            }
            size_t w = 0;
            if (stripWrappers)
                while (rest.substr(w).starts_with("module."))
                    w += 7;
            if (d.optimizerWrapper.empty())
                d.optimizerWrapper = "optimizer.state." + std::string(rest.substr(0, w));
            d.optNameFirst.insert(rest.substr(w), i);
            continue;
        }
        if (k.starts_with("optimizer.param_to_group_meta.")) {
            std::string_view rest = k.substr(30);
            while (rest.starts_with("module."))
                rest = rest.substr(7);
            if (const size_t dot = rest.rfind('.'); dot != std::string_view::npos)
                d.groupMeta.emplace(rest.substr(0, dot), i);
            continue;
        }
        if (k.find("optimizer.param_groups") != std::string_view::npos ||
            k.find("optimizer.optimizer.param_groups") != std::string_view::npos)
            d.paramGroups = true;
        if (k.starts_with("optimizer."))
            continue; // the optimizer's own state
        if (!d.keys[i].tensor && !d.megatronWrapped)
            continue;
        const size_t w = stripWrappers && !literalModel ? modelWrapperLength(k) : 0;
        if (d.megatronWrapped && stripWrappers && w == 0)
            continue; // args, rng_state, …: not model parameters
        if (d.modelWrapper.empty())
            d.modelWrapper = std::string(k.substr(0, w));
        d.model.insert(k.substr(w), i);
        if (!k.starts_with("common.pt/") &&
            (d.keys[i].tensor || (d.keys[i].object && d.keys[i].object->location)))
            d.modelKeys.push_back(i);
    }
    if (d.optimizerWrapper.empty())
        d.optimizerWrapper = "optimizer.state.module.module.module.";
}

} // namespace shardscope::detail
