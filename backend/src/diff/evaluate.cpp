// SPDX-License-Identifier: MIT
// Evaluating one parameter (or one optimizer state of it): what the real load asks for and
// finds, what a loader with more handlers would find, what only ShardScope maps, or why nothing
// provides it.
#include "diff/differ.h"

#include "common/problemtext.h"
#include "common/shapes.h"
#include "diff/causes.h"

#include <algorithm>
#include <regex>

namespace shardscope::detail {

DiffEntry Differ::evaluate(const Expanded &x, const std::string &state)
{
    const LayoutParam &p = x.param;
    if (m_legacy)
        return evaluateLegacy(x, state);
    const int layer = decoderLayerOf(p.name);
    if (const int offset = stageOffset(layer); offset > 0)
        return evaluateStageLocal(x, state, layer, offset);
    return evaluateNamed(x, state);
}

DiffEntry Differ::evaluateNamed(const Expanded &x, const std::string &state)
{
    const LayoutParam &p = x.param;
    // Without handle_experts_in_state_dict every EP rank asks for its local names.
    if (!x.localName.empty() && !enabled("experts_global")) {
        LayoutParam localParam = p;
        localParam.name = x.localName;
        localParam.expert = m_layout.numExperts / m_layout.parallel.ep > 0
                                ? p.expert % (m_layout.numExperts / m_layout.parallel.ep)
                                : p.expert;
        if (localParam.fusion)
            for (FusedSection &sec : localParam.fusion->sections)
                sec.name = withExpert(sec.name, localParam.expert);
        DiffEntry e = evaluateNamed(Expanded{localParam, {}, x.epRank}, state);
        e.param = p.name;
        e.name = state.empty() ? p.name : p.name + "." + state;
        if (x.epRank > 0 && !e.sources.empty()) {
            e.status = LoadStatus::WrongSource;
            e.realLoadFills = false;
            e.wrongSource = true;
            e.reason = "without expert globalisation EP rank " + std::to_string(x.epRank) +
                       " asks for " + e.sources.front().key + ", which holds expert " +
                       std::to_string(localParam.expert) + " (EP rank 0's), not expert " +
                       std::to_string(p.expert) + ": it loads the wrong weights silently";
            e.fix = "Load with a Megatron-LM whose fsdp_dtensor load runs "
                    "handle_experts_in_state_dict (--num-experts set).";
        }
        return e;
    }
    return evaluateParam(p, state);
}

DiffEntry Differ::evaluateStageLocal(const Expanded &x, const std::string &state, int layer,
                                     int offset)
{
    const std::string from = "decoder.layers." + std::to_string(layer) + ".";
    const std::string to = "decoder.layers." + std::to_string(layer - offset) + ".";
    auto local = [&](const std::string &n) {
        return n.starts_with(from) ? to + n.substr(from.size()) : n;
    };
    Expanded lx = x;
    lx.param.name = local(x.param.name);
    lx.param.absorbs = local(x.param.absorbs);
    if (lx.param.fusion)
        for (FusedSection &sec : lx.param.fusion->sections)
            sec.name = local(sec.name);
    if (!lx.localName.empty())
        lx.localName = local(lx.localName);
    DiffEntry e = evaluateNamed(lx, state);
    const LayoutParam &p = x.param;
    e.param = p.name;
    e.name = state.empty() ? p.name : p.name + "." + state;
    const size_t stage = stageOf(layer);
    const std::string asked = e.requestKeys.empty() ? to : e.requestKeys.front();
    const std::string why = "pp " + std::to_string(m_stageEnds.size()) + ": stage " +
                            std::to_string(stage) + " holds layers " + std::to_string(offset) +
                            "-" + std::to_string(m_stageEnds[stage] - 1) +
                            " and Megatron-FSDP names them from 0 (stage-local), so layer " +
                            std::to_string(layer) + " asks for " + asked;
    e.fix = "Resume with the pipeline-parallel size the checkpoint was saved with, or "
            "convert it to torch_dist (global layer numbers) and load that; renaming keys "
            "cannot serve two pipeline sizes at once.";
    if (e.realLoadFills || e.wrongSource) {
        e.status = LoadStatus::WrongSource;
        e.realLoadFills = false;
        e.wrongSource = true;
        e.reason = why + ", which holds layer " + std::to_string(layer - offset) +
                   "'s data: it loads the wrong weights silently";
    } else if (e.status == LoadStatus::Unloadable) {
        e.reason = why + ", which the checkpoint does not hold";
    }
    return e;
}

DiffEntry Differ::evaluateLegacy(const Expanded &x, const std::string &state)
{
    const LayoutParam &p = x.param;
    const ParallelConfig &par = m_layout.parallel;
    LayoutParam lp = p;
    lp.fusion.reset(); // no handlers: the module's own names and shapes
    lp.absorbs.clear();
    auto [stage, name] = legacyStageLocal(p.name);
    int epRank = 0;
    const bool expert = p.expert >= 0 && par.ep > 1 && m_layout.numExperts % par.ep == 0;
    if (expert) {
        const int perRank = m_layout.numExperts / par.ep;
        epRank = p.expert / perRank;
        name = withExpert(name, p.expert % perRank);
    }
    const int tp = expert ? par.etp : par.tp;
    if (p.tpDim >= 0 && size_t(p.tpDim) < lp.shape.size() && tp > 1)
        lp.shape[size_t(p.tpDim)] /= tp;
    const std::string dir = legacyDir(0, stage, epRank);
    m_legacyDirsRead.insert(dir);
    lp.name = dir + "/model." + name;
    m_tpDim = p.tpDim; // judge() names a TP-size change from the shards' ratio
    m_tpLocalSize = tp;
    DiffEntry e = evaluateParam(lp, state);
    m_tpDim = -1;
    m_tpLocalSize = 1;
    e.param = p.name;
    e.name = state.empty() ? p.name : p.name + "." + state;
    if (!m_legacyDirs.count(dir)) {
        e.reason = "the checkpoint has no " + dir +
                   "/model_optim_rng.pt, the file this rank loads (saved with other "
                   "parallel sizes?)";
        e.fix = "Load with the tensor, pipeline and expert parallel sizes the checkpoint "
                "was saved with (legacy torch checkpoints cannot be resharded on load), or "
                "convert it with Megatron's tools/checkpoint/convert.py.";
    } else if (e.status == LoadStatus::ShapeMismatch) {
        e.reason += " (TP-local: tp " + std::to_string(tp) + ")";
    }
    return e;
}

DiffEntry Differ::evaluateParam(const LayoutParam &p, const std::string &state)
{
    DiffEntry e;
    e.section = state.empty() ? Section::Model : Section::Optimizer;
    e.param = p.name;
    e.state = state;
    e.name = state.empty() ? p.name : p.name + "." + state;
    e.shape = state == "step" ? std::vector<int64_t>{} : p.shape;
    // Optimizer states have the optimizer's dtype (fp32, or bf16 when precision-aware).
    e.dtype = state.empty() ? p.dtype : std::string();

    // Each optimizer state asks for the same request: build it once per parameter.
    if (!scratch().cached.holds(p))
        scratch().cached.keep(p, request(p, false));
    const Request *qp = &scratch().cached.request;
    setRequest(e, *qp, state);
    std::vector<DiskKey *> found;

    // 1. What the real load asks for. torch_dist asks for SwiGLU's [W; V] in one key, or for
    // `_w` / `_v` keys when the checkpoint was saved with singleton_local_shards; where the data
    // is (everyRule), either.
    bool hit = lookup(*qp, state, found);
    Request w;
    if (!hit && m_torchDist && m_options.everyRule && p.fusion && p.fusion->rule == "swiglu" &&
        enabled("swiglu")) {
        w = request(p, false, !m_singleton);
        if (lookup(w, state, found)) {
            hit = true;
            qp = &w;
            setRequest(e, *qp, state);
        }
    }
    const Request &q = *qp;
    if (hit) {
        e.rules = q.rules;
        fillSources(e, q, found);
        for (DiskKey *k : found)
            mark(k->requested);
        const bool stacked = std::any_of(scratch().lead.begin(), scratch().lead.end(),
                                         [](const auto &l) { return !l.empty(); });
        e.realLoadFills = std::all_of(e.rules.begin(), e.rules.end(), byLoader);
        judge(e, q, found, state,
              q.split                ? LoadStatus::Split
              : q.renamed || stacked ? LoadStatus::Rename
                                     : LoadStatus::Ok);
        if (e.reason.empty() && q.split)
            e.reason = "split by " + q.rules.front() + " into " + std::to_string(q.pieces.size()) +
                       " stored tensors";
        else if (e.reason.empty() && (q.renamed || stacked))
            e.reason = "stored as " + std::string(found.front()->key) +
                       (stacked ? " at index " + std::to_string(scratch().lead.front().front()) +
                                      " of its stacked axis"
                                : std::string()) +
                       " (rule " + e.rules.back() + ")";
        return e;
    }
    e.realLoadFills = false;

    // 2. The loader lacks a handler that would have found it, or (torch_dist) the data is there
    // in another form of sharded keys than the load asks for.
    if (!scratch().ideal.holds(p))
        scratch().ideal.keep(p, request(p, true));
    const Request *idealp = &scratch().ideal.request; // nothing below evaluates another
    Request halves;
    scratch().anyForm = true;
    bool there = lookup(*idealp, state, found);
    if (!there && m_torchDist && p.fusion && p.fusion->rule == "swiglu") {
        halves = request(p, true, !m_singleton);
        idealp = &halves;
        there = lookup(halves, state, found);
    }
    const Request &ideal = *idealp;
    const bool otherForm = m_torchDist && (scratch().otherForm || ideal.split != qp->split);
    scratch().anyForm = false;
    if (there) {
        std::vector<std::string> off;
        for (const std::string &r : ideal.rules)
            if (!enabled(r) || (!m_megatronLoader && byLoader(r)))
                off.push_back(r);
        for (DiskKey *k : found) {
            mark(k->used); // explained here, not unconsumed
            e.unreadKeys.emplace_back(k->key);
            e.unreadEntries.push_back(entryOf(k));
        }
        e.status = LoadStatus::Unloadable;
        if (off.empty() && otherForm) {
            formMismatch(e, found, ideal.split != qp->split);
            return e;
        }
        if (!m_megatronLoader) {
            e.reason = "the checkpoint stores it as " + std::string(found.front()->key) +
                       (found.size() > 1 ? " (+" + std::to_string(found.size() - 1) + " more)"
                                         : std::string()) +
                       ", which rule " + (off.empty() ? "?" : off.front()) + " maps; a " +
                       std::string(formatName(m_index.format)) +
                       " load has no such handler and asks for " + e.requestKeys.front();
            e.fix = "Convert the checkpoint to the model's names (the " +
                    (off.empty() ? std::string("?") : off.front()) +
                    " mapping), or build the model the way the checkpoint was saved.";
            return e;
        }
        e.reason = "the checkpoint stores it as " + std::string(found.front()->key) +
                   (found.size() > 1 ? " (+" + std::to_string(found.size() - 1) + " more)"
                                     : std::string()) +
                   ", which only rule " + (off.empty() ? "?" : off.front()) +
                   " maps; with the rule disabled the load asks for " + e.requestKeys.front() +
                   ", which is not there";
        e.fix = "Load with a Megatron-LM whose fsdp_dtensor load runs " +
                handlerOf(off.empty() ? std::string() : off.front()) + ".";
        for (DiskKey *k : found)
            mark(k->used); // explained here, not unconsumed
        return e;
    }

    // 3. Mappings only ShardScope makes: the data is there, the loader will not find it.
    if (matchOtherNames(e, p, q, state))
        return e;

    e.status = LoadStatus::Unloadable;
    e.reason = "no " + e.requestKeys.front() +
               (e.requestKeys.size() > 1 ? " (or its other sections)" : std::string()) +
               " in the checkpoint";
    if (!p.absorbs.empty() && !detail::absorbedByMlaHandler(p.name) &&
        m_disk.findModel(p.absorbs)) {
        e.reason += "; the layout says it absorbs " + p.absorbs +
                    ", which the checkpoint holds, but no handler of Megatron's maps that "
                    "norm onto it (the MLA handler moves only linear_qkv_down_proj's), so "
                    "it keeps its initial values";
        e.fix = "It is a norm of its own (e.g. the query norm TE fuses into linear_q_proj "
                "when q_lora_rank is null, NVIDIA-NeMo/Megatron-Bridge#5261): build the model "
                "without it (layout --no-mla-query-norm), or initialise it deliberately.";
        return e;
    }
    if (state.empty() && (quantizedExperts(e, p) || missingCause(e, p)))
        return e;
    if (!state.empty()) {
        findOptimizerIndices();
        if (!m_optimizerIndexWhy.empty()) { // kept by position, and not found by it
            e.reason += "; " + m_optimizerIndexWhy;
            e.fix = "Save the optimizer by name: dcp.save({'optimizer': "
                    "get_optimizer_state_dict(model, optimizer)}); this checkpoint loads through "
                    "a raw optimizer.state_dict() of an optimizer built as the saving run built "
                    "it (its param_groups in the same order), then Optimizer.load_state_dict "
                    "(KempnerInstitute/KempnerForge#115).";
            return e;
        }
    }
    e.fix = state.empty()
                ? "Nothing in the checkpoint provides it: compare the model config (layers, "
                  "experts, fusion flags, MTP) with the run that saved the checkpoint."
                : "The checkpoint has no " + state +
                      " for it: a partial load keeps the optimizer state at its initial "
                      "value; use --no-load-optim or a checkpoint saved with this parameter.";
    return e;
}

bool Differ::quantizedExperts(DiffEntry &e, const LayoutParam &p)
{
    const std::optional<QuantizedKeys> q = detail::mxfp4KeysOf(p.name);
    if (!q)
        return false;
    DiskKey *blocks = m_disk.findModel(q->blocks), *scales = m_disk.findModel(q->scales);
    if (!blocks || !scales || !blocks->tensor || !scales->tensor)
        return false;
    const std::vector<int64_t> dense =
        detail::mxfp4DenseShape(blocks->tensor->shape, scales->tensor->shape);
    if (dense.empty())
        return false;
    for (DiskKey *k : {blocks, scales}) {
        mark(k->used); // explained here, not unconsumed
        e.unreadKeys.emplace_back(k->key);
        e.unreadEntries.push_back(entryOf(k));
    }
    e.reason = "stored MXFP4-quantized, as gpt-oss ships its experts: " + std::string(blocks->key) +
               " " + shapeText(blocks->tensor->shape) + " " + blocks->tensor->dtypeName +
               " (two 4-bit values a byte, 32 a block) and " + std::string(scales->key) + " " +
               shapeText(scales->tensor->shape) + " " + scales->tensor->dtypeName +
               " (a power-of-two scale a block), which dequantize to " + shapeText(dense) +
               (dense == p.shape ? ", the tensor the model asks for as "
                                 : ", not the model's " + shapeText(p.shape) + " for ") +
               e.requestKeys.front() +
               "; a load of the state dict finds no such key (and does not know the blocks "
               "and scales)";
    e.fix = "Dequantize the experts: load through transformers with "
            "quantization_config=Mxfp4Config(dequantize=True) (from_pretrained then turns each "
            "_blocks/_scales pair into the bf16 tensor), or convert the checkpoint once with "
            "transformers.integrations.mxfp4.convert_moe_packed_tensors(blocks, scales) per "
            "pair and save the result under the dense name; a plain load_state_dict cannot "
            "read MXFP4 (openai/harmony#34, tenstorrent/tt-forge-models#443).";
    return true;
}

bool Differ::missingCause(DiffEntry &e, const LayoutParam &p)
{
    // Saved from a PEFT model without merging (huggingface/peft#2647): the plain model's weight
    // is the LoRA module's base_layer, beside its adapter.
    if (const std::string base = detail::peftBaseLayerName(p.name); !base.empty())
        for (const std::string &prefix : {std::string("base_model.model."), std::string()})
            if (DiskKey *k = m_disk.findModel(prefix + base); k && k->tensor) {
                const std::string module = prefix + p.name.substr(0, p.name.rfind('.'));
                std::vector<DiskKey *> adapter;
                for (const char *part : {".lora_A.default.weight", ".lora_B.default.weight",
                                         ".lora_A.weight", ".lora_B.weight"})
                    if (DiskKey *a = m_disk.findModel(module + part); a && a->tensor)
                        adapter.push_back(a);
                std::string shapes;
                for (DiskKey *a : adapter)
                    shapes += (shapes.empty() ? "" : ", ") + std::string(a->key) + " " +
                              shapeText(a->tensor->shape);
                for (DiskKey *x : adapter) {
                    mark(x->used);
                    e.unreadKeys.emplace_back(x->key);
                    e.unreadEntries.push_back(entryOf(x));
                }
                mark(k->used);
                e.unreadKeys.emplace_back(k->key);
                e.unreadEntries.push_back(entryOf(k));
                e.reason = "stored as " + std::string(k->key) +
                           ", the base weight of a PEFT LoRA module" +
                           (adapter.empty() ? std::string()
                                            : ", beside its unmerged adapter (" + shapes + ")") +
                           ": the checkpoint is the PEFT-wrapped model's state dict; the load "
                           "asks for " +
                           e.requestKeys.front();
                e.fix = "Merge the adapters into the weights before saving: "
                        "model.merge_and_unload(), then save_pretrained or state_dict() "
                        "(huggingface/peft#2647); or load this state dict into the PEFT-wrapped "
                        "model (get_peft_model with the training's LoraConfig). Renaming " +
                        std::string(k->key) +
                        " alone would load the weight from before fine-tuning: the tuned one is "
                        "W + lora_B·lora_A·(lora_alpha / r).";
                return true;
            }
    // A PEFT-wrapped model against a checkpoint of the base model (pytorch/torchtitan#2945):
    // its adapters are new.
    if (detail::loraAdapterName(p.name)) {
        e.reason += ": a LoRA adapter weight, which get_peft_model adds to the base model; a "
                    "base checkpoint never holds it";
        e.fix = "Expected for a base checkpoint: load it before wrapping (from_pretrained, then "
                "get_peft_model, which initialises lora_B to zeros so the wrapped model starts "
                "as the base), or into the wrapped model with peft's set_base_model_state_dict "
                "(huggingface/peft#3000) or load_state_dict(strict=False).";
        return true;
    }
    if (std::string fix = detail::addedBySettingFix(p.name); !fix.empty()) {
        e.fix = std::move(fix);
        return true;
    }
    // Megatron's legacy GroupedMLP (--moe-grouped-gemm without TE's TEGroupedMLP) holds every
    // expert in weight1 / weight2; the checkpoint has SequentialMLP's local_experts
    // (NVIDIA/Megatron-LM#924).
    for (const char *w : {".mlp.experts.weight1", ".mlp.experts.weight2"})
        if (p.name.ends_with(w)) {
            const std::string stem = p.name.substr(0, p.name.size() - 7); // "….mlp.experts."
            const std::string local =
                stem + "local_experts.0.linear_fc" + (w[19] == '1' ? "1" : "2") + ".weight";
            if (DiskKey *k = m_disk.findModel(local); k && k->tensor) {
                // Each local expert's key is explained here, not left unconsumed.
                const std::string fc = std::string("linear_fc") + (w[19] == '1' ? "1" : "2");
                for (int x = 0;; ++x) {
                    DiskKey *ek = m_disk.findModel(stem + "local_experts." + std::to_string(x) +
                                                   "." + fc + ".weight");
                    if (!ek || !ek->tensor)
                        break;
                    mark(ek->used);
                    e.unreadKeys.emplace_back(ek->key);
                    e.unreadEntries.push_back(entryOf(ek));
                }
                e.reason += "; the checkpoint holds the experts apart, SequentialMLP's " + local +
                            " " + shapeText(k->tensor->shape) +
                            " and the other local_experts, where the model's legacy GroupedMLP "
                            "keeps them all in one transposed tensor";
                e.fix = "Build the model the way the checkpoint was saved: without "
                        "--moe-grouped-gemm (SequentialMLP), or with Transformer Engine's "
                        "TEGroupedMLP (--moe-grouped-gemm with --transformer-impl "
                        "transformer_engine, without --moe-use-legacy-grouped-gemm where that "
                        "flag exists), whose linear_fc1.weight<e> megatron-core maps to "
                        "local_experts (NVIDIA/Megatron-LM#924).";
                return true;
            }
        }
    // A decoder layer past the checkpoint's depth: the model is built deeper.
    std::string_view stem;
    if (const int layer = detail::layerOf(p.name, stem); layer >= 0 && !m_legacy && !m_torchDist) {
        std::call_once(m_storedLayersOnce, [&] {
            for (uint32_t i : m_disk.modelKeys) {
                std::string_view name = m_disk.keys[i].key, s;
                if (name.starts_with(m_disk.modelWrapper))
                    name.remove_prefix(m_disk.modelWrapper.size());
                if (const int n = detail::layerOf(name, s); n >= 0) {
                    int &count = m_storedLayers[std::string(s)];
                    count = std::max(count, n + 1);
                }
            }
        });
        const auto it = m_storedLayers.find(std::string(stem));
        if (it != m_storedLayers.end() && layer >= it->second) {
            const std::string n = std::to_string(it->second);
            e.reason += "; the checkpoint has " + n + " layers (" + std::string(stem) + "0-" +
                        std::to_string(it->second - 1) + ") and the model asks for layer " +
                        std::to_string(layer);
            e.fix = "The model is built deeper than the saving run: build it with " + n +
                    " layers (Megatron: --num-layers " + n + "; Hugging Face: num_hidden_layers " +
                    n + "), or initialise the layers past " + std::to_string(it->second - 1) +
                    " deliberately (a partial load leaves them at their initial values).";
            return true;
        }
    }
    return false;
}

std::vector<std::string> Differ::teModules() const
{
    static const std::regex te(
        R"(^(.*\.(self_attention|mlp|mlp\.shared_experts)\.(linear_qkv|linear_proj|linear_fc1|)"
        R"(linear_fc2|linear_q_proj|linear_q_down_proj|linear_q_up_proj|linear_kv_down_proj|)"
        R"(linear_kv_up_proj|linear_qkv_down_proj))\.[a-z_]+$)");
    // Routed experts, in torch_dist only: each expert's linear keeps one (SequentialMLP's
    // linears; TEGroupedMLP splits its grouped linear's per GEMM under the same sharded keys).
    static const std::regex sequential(
        R"(^(.*\.mlp\.experts\.local_experts\.\d+\.linear_fc[12])\.weight$)");
    static const std::regex grouped(R"(^(.*\.mlp\.experts\.linear_fc[12])\.weight(\d+)$)");
    // The output layer and MTP's eh_proj are Megatron linears too (ColumnParallelLinear or TE's):
    // their state dicts keep an extra state, which GPTModel's sharded_state_dict leaves out.
    static const std::regex head(R"(^(.*\b(output_layer|eh_proj))\.weight$)");
    std::vector<std::string> out;
    std::unordered_set<std::string> seen;
    std::smatch m;
    for (const Expanded &x : m_params) {
        if (!m_torchDist && std::regex_match(x.param.name, m, head)) {
            if (seen.insert(m[1].str() + "._extra_state").second)
                out.push_back(m[1].str() + "._extra_state");
            continue;
        }
        if (m_torchDist && x.param.name.find(".mlp.experts.") != std::string::npos) {
            std::string name;
            if (std::regex_match(x.param.name, m, sequential))
                name = m[1].str() + "._extra_state";
            else if (std::regex_match(x.param.name, m, grouped))
                name = m[1].str() + "._extra_state" + m[2].str();
            if (!name.empty() && seen.insert(name).second)
                out.push_back(std::move(name));
            if (!name.empty())
                continue;
        }
        if (!std::regex_match(x.param.name, m, te))
            continue;
        const std::string module = m[1].str();
        const size_t at = module.rfind(".self_attention.");
        // TEDotProductAttention has one; the local spec's DotProductAttention has none.
        if (at != std::string::npos && m_layout.transformerEngine) {
            const std::string core = module.substr(0, at) + ".self_attention.core_attention";
            if (seen.insert(core + "._extra_state").second)
                out.push_back(core + "._extra_state");
        }
        if (seen.insert(module + "._extra_state").second)
            out.push_back(module + "._extra_state");
    }
    return out;
}

DiffEntry Differ::evaluateExtraState(const std::string &name)
{
    DiffEntry e;
    e.param = e.name = name;
    const std::string module = name.substr(0, name.rfind("._extra_state"));
    e.rules = {"extra_state"};
    // The keys the load asks for (the first is its own spelling), each with its offsets on
    // torch_dist's stacked axes; then, torch_dist, the same object in another form of keys.
    std::vector<std::pair<std::string, std::vector<int64_t>>> keys, other;
    if (m_torchDist) {
        const std::string rest =
            m_layout.mtpInner != "transformer_layer"
                ? replaceAll(e.name, "." + m_layout.mtpInner + ".", ".transformer_layer.")
                : e.name;
        // A ShardedObject's unique key: the sharded key, then its offsets on the stacked axes
        // and their sizes (`0_1` without any); older saves omit the sizes.
        auto unique = [&](const ShardedName &sn, auto &into) {
            std::string at = "/shard_", of;
            for (size_t i = 0; i < sn.lead.size(); ++i) {
                at += (i ? "." : "") + std::to_string(sn.lead[i]);
                of += (i ? "." : "") + std::to_string(sn.leadSizes[i]);
            }
            if (sn.lead.empty())
                at += "0", of = "1";
            into.push_back({sn.key + at + "_" + of, sn.lead});
            into.push_back({sn.key + at, sn.lead});
        };
        unique(shardedName(rest, m_form), keys);
        for (const TorchDistForm f :
             {TorchDistForm{true, true}, TorchDistForm{false, true}, TorchDistForm{false, false}})
            if (!(f == m_form))
                unique(shardedName(rest, f), other);
    } else if (m_legacy) {
        const auto [stage, local] = legacyStageLocal(e.name);
        const std::string dir = legacyDir(0, stage, 0);
        m_legacyDirsRead.insert(dir);
        keys = {{dir + "/model." + local, {}}};
    } else {
        keys = {{m_disk.modelWrapper + e.name, {}}, {e.name, {}}};
    }
    e.requestKeys = {keys.front().first};
    auto stored = [&](const std::string &k) -> DiskKey * {
        const auto it = m_sorted->extraStateKeys.find(k);
        return it == m_sorted->extraStateKeys.end() ? nullptr : &m_disk.keys[it->second];
    };
    for (const auto &[k, index] : keys)
        if (DiskKey *d = stored(k)) {
            mark(d->used);
            mark(d->requested);
            e.sources.push_back(
                {k, {}, "object", 0, 0, 0, 0, index, d->key == k ? entryOf(d) : int64_t(-1)});
            e.status = LoadStatus::Ok;
            e.reason = "Transformer Engine's extra state (FP8 metadata), stored as " + k;
            return e;
        }
    for (const auto &[k, index] : other)
        if (DiskKey *d = stored(k)) {
            // Where the data is (a repair renames the object); the load asks for another key.
            mark(d->used);
            e.sources.push_back(
                {k, {}, "object", 0, 0, 0, 0, index, d->key == k ? entryOf(d) : int64_t(-1)});
            if (m_options.everyRule) {
                e.status = LoadStatus::Rename;
                e.reason = "stored as " + k + ", in another form of torch_dist keys";
                return e;
            }
            e.sources.clear();
            e.unreadKeys = {k};
            e.unreadEntries = {d->key == k ? entryOf(d) : int64_t(-1)};
            e.status = LoadStatus::Unloadable;
            e.realLoadFills = false;
            e.reason = "stored as " + k + "; megatron-core asks for " + keys.front().first + " (" +
                       formText(m_form) + ": " + m_layersWhy + "), which is not there";
            e.fix = "Repair it: shardscope-cli fix renames the extra states (and rewrites the "
                    "tensors) into the form this load asks for; or load with the model the "
                    "checkpoint was saved from.";
            return e;
        }
    e.status = LoadStatus::Unloadable;
    e.realLoadFills = false;
    e.reason = "the model is built with Transformer Engine, whose " + module +
               " asks for its extra state (FP8 scaling metadata) as " + keys.front().first +
               "; the checkpoint has none (saved by a model without Transformer Engine, "
               "--transformer-impl local, or by a converter that drops it)";
    e.fix = m_torchDist
                ? "Load with --dist-ckpt-strictness log_unexpected (or ignore_all): the extra "
                  "state only holds FP8 scaling factors, which can start from their "
                  "defaults; or build the model with --transformer-impl local."
            : m_legacy ? "Nothing breaks: Megatron retries the strict load as non-strict and goes "
                         "on with the extra state at its defaults (it only matters for FP8 "
                         "training); --transformer-impl local builds the model without it."
                       : "Load with strict=False (the extra state only holds FP8 scaling "
                         "factors), or build the model without Transformer Engine.";
    return e;
}

void Differ::judge(DiffEntry &e, const Request &q, const std::vector<DiskKey *> &found,
                   const std::string &state, LoadStatus mapped)
{
    e.status = mapped;
    for (size_t i = 0; i < found.size(); ++i) {
        const TensorEntry &t = *found[i]->tensor;
        const bool step = state == "step";
        const size_t lead = i < scratch().lead.size() ? scratch().lead[i].size() : 0;
        const std::vector<int64_t> stored(t.shape.begin() + std::ptrdiff_t(lead), t.shape.end());
        if (!step && stored != q.pieces[i].shape) {
            e.status = LoadStatus::ShapeMismatch;
            e.realLoadFills = false;
            e.reason = "stored as " + std::string(found[i]->key) + " " + shapeText(t.shape) +
                       ", the model expects " + shapeText(q.pieces[i].shape) +
                       "; the load raises on the size mismatch, whatever its strictness";
            e.fix = detail::shapeMismatchFix(q.pieces[i].name, stored, q.pieces[i].shape, m_tpDim,
                                             m_tpLocalSize);
            // A ZeRO-3 placeholder in DeepSpeed's own model states: param_shapes says what it
            // stands for.
            if (const auto it = m_disk.deepspeedShapes.find(std::string_view(q.pieces[i].name));
                it != m_disk.deepspeedShapes.end() && stored.size() == 1 && stored[0] == 0)
                e.reason += "; DeepSpeed's param_shapes records it as " + shapeText(it->second) +
                            ", partitioned over the *_optim_states.pt files (ZeRO-3)";
            return;
        }
        const Problem *problem = found[i]->problem;
        if (problem && problem->effect == Problem::Effect::Unreadable) {
            e.status = LoadStatus::Unreadable;
            e.realLoadFills = false;
            // Per file, not per item, so that a report folds a file's keys into one group
            // (inspect lists each item's offsets).
            const auto slash = problem->file.find_last_of('/');
            e.reason = std::string(found[i]->key) + ": its data in " +
                       problem->file.substr(slash == std::string::npos ? 0 : slash + 1) +
                       " cannot be read (`shardscope-cli inspect` names each broken item); "
                       "the load raises reading it, whatever the strictness";
            // A FIFO, socket or device where the data file was: nothing was cut short.
            e.fix = problem->message.find(detail::kNotRegularFile) != std::string::npos
                        ? "Put the data file the save wrote back in place of " +
                              problem->file.substr(slash == std::string::npos ? 0 : slash + 1) +
                              " (a checkpoint's data files are regular files; this one is not) "
                              "or load an earlier checkpoint."
                        : "Restore the checkpoint's data files (a save cut short, or a copy "
                          "that stopped early; shardscope-cli inspect lists every broken item) "
                          "or load an earlier checkpoint.";
            return;
        }
        if (problem && problem->effect == Problem::Effect::Holes) {
            e.status = LoadStatus::Partial;
            e.realLoadFills = false;
            e.reason = std::string(found[i]->key) + ": " + problem->message +
                       "; a load finishes without a word and leaves the uncovered part at "
                       "its initial values";
            e.fix = "The metadata's chunks do not cover the tensor (ranks that disagreed on "
                    "the sharding, or an edited .metadata; shardscope-cli inspect lists the "
                    "tensor's chunks): re-save the checkpoint or load an earlier one.";
            return;
        }
        if (!step && !e.dtype.empty() && t.dtypeName != e.dtype &&
            e.status != LoadStatus::ShapeMismatch) {
            e.status = LoadStatus::Cast;
            e.reason = "stored as " + t.dtypeName + ", loaded into " + e.dtype +
                       " (DCP copies with a cast)";
            e.narrowing =
                e.narrowing || narrowingCast(t.dtype, dtypeFromName(e.dtype).value_or(t.dtype));
        }
    }
}

DiffEntry Differ::groupEntry(const LayoutParam &p, const std::string &firstLeaf) const
{
    DiffEntry e;
    e.section = Section::Other;
    e.param = p.name;
    e.state = "param_group";
    e.name = p.name + ".param_group";
    e.requestKeys = {"optimizer.param_to_group_meta.module.module.module." + p.name + firstLeaf};
    auto it = m_disk.groupMeta.find(p.name);
    if (it == m_disk.groupMeta.end())
        it = m_disk.groupMeta.find(
            replaceAll(p.name, "." + m_layout.mtpInner + ".", ".transformer_layer."));
    if (it != m_disk.groupMeta.end()) {
        e.sources.push_back(
            {std::string(m_disk.keys[it->second].key), {}, {}, 0, 0, 0, 0, {}, it->second});
    } else {
        e.status = LoadStatus::Unloadable;
        e.realLoadFills = false;
        e.reason = "no optimizer.param_to_group_meta entries for it, while the checkpoint "
                   "has them for other parameters";
        e.fix = "Re-save with the optimizer groups of every parameter (the model has a "
                "parameter the saving run's optimizer did not).";
        // Saved by a model that held the sections apart: the split handlers rename
        // optimizer.state to on-disk names, never param_to_group_meta.
        std::vector<std::string> parts;
        if (p.fusion)
            for (const FusedSection &sec : p.fusion->sections)
                if (m_disk.groupMeta.count(sec.name))
                    parts.push_back(sec.name);
        if (!p.absorbs.empty() && m_disk.groupMeta.count(p.absorbs))
            parts.push_back(p.absorbs);
        if (!parts.empty()) {
            std::string list;
            for (const std::string &n : parts)
                list += (list.empty() ? "" : ", ") + n;
            e.reason = "the checkpoint keeps optimizer groups for " + list +
                       " (saved by a model that held them apart): Megatron's handlers "
                       "rename optimizer.state to the on-disk names but leave "
                       "param_to_group_meta under the live names, so this request has "
                       "no entry";
            e.fix = "Load with --no-strict-fsdp-dtensor-load (allow_partial_load: this "
                    "run's group, lr and weight decay, stands for it), or rename the "
                    "checkpoint's param_to_group_meta entries of " +
                    list + " to " + p.name + ".";
        }
    }
    return e;
}

} // namespace shardscope::detail
