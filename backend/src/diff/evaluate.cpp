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
    if (!scratch().cached.holds(p)) {
        scratch().cached.request = request(p, false);
        scratch().cached.name = p.name;
        scratch().cached.shape = p.shape;
        scratch().cached.absorbs = p.absorbs;
        scratch().cached.fusion = p.fusion;
        scratch().cached.valid = true;
    }
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
    Request ideal = request(p, true);
    scratch().anyForm = true;
    bool there = lookup(ideal, state, found);
    if (!there && m_torchDist && p.fusion && p.fusion->rule == "swiglu") {
        ideal = request(p, true, !m_singleton);
        there = lookup(ideal, state, found);
    }
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
    e.fix = state.empty()
                ? "Nothing in the checkpoint provides it: compare the model config (layers, "
                  "experts, fusion flags, MTP) with the run that saved the checkpoint."
                : "The checkpoint has no " + state +
                      " for it: a partial load keeps the optimizer state at its initial "
                      "value; use --no-load-optim or a checkpoint saved with this parameter.";
    return e;
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
    std::vector<std::string> out;
    std::unordered_set<std::string> seen;
    std::smatch m;
    for (const Expanded &x : m_params) {
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
        const auto it = m_extraStateKeys.find(k);
        return it == m_extraStateKeys.end() ? nullptr : &m_disk.keys[it->second];
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
