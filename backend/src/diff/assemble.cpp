// SPDX-License-Identifier: MIT
// Assembling the result: the stored keys nobody asked for, with what each likely is, and what
// the real load does with all of it.
#include "diff/differ.h"

#include "diff/loadoutcome.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace shardscope::detail {

void Differ::collectUnconsumed(DiffResult &r)
{
    for (const DiskKey &k : m_disk.keys) {
        if (k.used)
            continue;
        std::string legacyNote;
        if (m_legacy && !legacyUnconsumed(k.key, legacyNote))
            continue;
        const bool inModel = m_disk.findModel(k.key.substr(modelWrapperLength(k.key))) != nullptr;
        const bool training = m_disk.megatronWrapped ? modelWrapperLength(k.key) == 0 : !k.tensor;
        if (!inModel && training && !k.key.starts_with("optimizer.state."))
            continue; // args, iteration, rng state, param_groups: the training loop's
        if (k.key.starts_with("optimizer.state.") && !m_options.includeOptimizer)
            continue;
        UnconsumedKey u;
        u.key = std::string(k.key);
        u.entry = entryOf(&k);
        u.tensor = k.tensor != nullptr;
        if (k.tensor) {
            u.shape = k.tensor->shape.toVector();
            u.dtype = k.tensor->dtypeName;
        }
        u.note = legacyNote.empty() ? stageLocalNote(k.key) : legacyNote;
        if (u.note.empty() && k.tensor)
            u.note = shapeNote(k.key, *k.tensor);
        if (u.note.empty() && k.tensor)
            u.note = detail::recomputedBufferNote(k.key);
        if (u.note.empty() && k.tensor)
            u.note = untiedOutputNote(k.key);
        if (u.note.empty())
            u.note = !k.key.starts_with("optimizer.state.")
                         ? (stateDictLoad() ? "no expected parameter consumes it; a strict "
                                              "load_state_dict raises Unexpected key(s) on "
                                              "it, a non-strict one returns it"
                                            : "no expected parameter consumes it; a DCP load "
                                              "ignores it silently")
                     : optimizerStateOfKnownParam(k.key)
                         ? "an optimizer state the layout does not list (layout "
                           "optimizer.states)"
                         : "optimizer state of a parameter the model does not have";
        r.unconsumed.push_back(std::move(u));
    }
}

void Differ::assembleOutcome(DiffResult &r)
{
    detail::LoadContext context{{}, m_fsdpDtensorLoad, {}, {}};
    if (m_disk.deepspeed)
        context.stateDictEntry = m_disk.modelWrapper;
    context.raisesFirst = globalShapeMismatch(r);
    std::vector<std::string> &unrequested = context.unrequested;
    std::vector<uint32_t> stored = m_disk.modelKeys;
    // Extra states stored as objects (legacy files; torch_dist ShardedObjects).
    for (const auto &[name, i] : m_sorted->extraStateKeys)
        if (!m_disk.keys[i].tensor && m_disk.keys[i].key == name)
            stored.push_back(i);
    for (uint32_t i : stored) {
        const DiskKey &k = m_disk.keys[i];
        if (k.requested)
            continue;
        if (!m_legacy) {
            // DeepSpeed's model states: load_state_dict gets the `module` entry.
            unrequested.emplace_back(m_disk.deepspeed && k.key.starts_with(m_disk.modelWrapper)
                                         ? k.key.substr(m_disk.modelWrapper.size())
                                         : k.key);
            continue;
        }
        // A rank's load_state_dict sees its own file's `model` entry: the files the
        // requests read, names without the file.
        const size_t slash = k.key.find('/');
        if (slash != std::string_view::npos &&
            m_legacyDirsRead.count(std::string(k.key.substr(0, slash))) &&
            k.key.substr(slash).starts_with("/model."))
            unrequested.emplace_back(k.key.substr(slash + 7));
    }
    r.outcome = detail::loadOutcome(r, m_index, m_options, context);
    r.outcome.warnings.insert(r.outcome.warnings.end(), m_tieWarnings.begin(), m_tieWarnings.end());
    if (m_torchDist && m_layersAssumed && !m_blockLayers.empty())
        r.outcome.warnings.push_back(
            "the layout does not say how the model's torch_dist load asks for its decoder layers "
            "(torch_dist.layers); taken as the checkpoint stores them (" +
            std::string(m_form.layersStacked ? "stacked" : "a key per layer") +
            "): a model whose block is " +
            (m_form.layersStacked ? "not homogeneous (moe_layer_freq a list or > 1, …)"
                                  : "homogeneous") +
            " asks for the other form and fails to load; a layout from shardscope-cli layout "
            "or tools/export_layout.py says");
    if (m_legacy && !m_legacyMissingFiles.empty()) {
        // torch.load of a rank's file that is not there raises before anything loads.
        r.outcome = LoadOutcome{};
        r.outcome.action = LoadOutcome::Action::Raises;
        r.outcome.message = "FileNotFoundError: [Errno 2] No such file or directory: '" +
                            m_index.dataDir + "/" + m_legacyMissingFiles.front() +
                            "/model_optim_rng.pt' (the model's parallel sizes ask for " +
                            std::to_string(m_legacyMissingFiles.size()) +
                            " rank files the checkpoint does not have)";
        r.outcome.namedKeys = m_legacyMissingFiles;
    }
    summariseCasts(r);
}

std::string Differ::shapeNote(std::string_view key, const TensorEntry &t) const
{
    std::string_view rest = key.substr(modelWrapperLength(key));
    if (key.starts_with("optimizer."))
        return {};
    const int layer = decoderLayerOf(std::string(rest));
    if (layer >= 0 && m_decoderLayers > 0 && layer >= m_decoderLayers)
        return "layer " + std::to_string(layer) + " is past the model's " +
               std::to_string(m_decoderLayers) +
               " decoder layers: a deeper model saved it (--num-layers differs), and a "
               "load ignores it";
    const int experts = m_layout.numExperts;
    if (experts > 1 && t.shape.size() >= 2 && t.shape[0] == experts) {
        // The per-expert keys the model asks for in its place, if any.
        std::string stem(rest);
        if (const size_t dot = stem.rfind('.'); dot != std::string::npos)
            stem = stem.substr(0, dot);
        std::string asked;
        for (const Expanded &x : m_params)
            if (x.param.expert >= 0 && decoderLayerOf(x.param.name) == layer &&
                x.param.name.starts_with(stem + ".weight")) {
                asked = x.param.name;
                break;
            }
        return "its leading axis is the expert count (" + std::to_string(experts) +
               "): all experts stacked in one tensor" +
               (asked.empty() ? std::string()
                              : ", where the model asks for one key per expert (" + asked +
                                    ", …); a load that does not unstack it leaves those "
                                    "experts unloaded");
    }
    return {};
}

std::string Differ::stageLocalNote(std::string_view key) const
{
    if (m_stageEnds.empty())
        return {};
    std::string_view rest = key;
    if (rest.starts_with("optimizer.state."))
        rest = rest.substr(16);
    while (rest.starts_with("module."))
        rest = rest.substr(7);
    rest = rest.substr(modelWrapperLength(rest));
    const int layer = decoderLayerOf(std::string(rest));
    if (layer < m_maxStageLayers)
        return {};
    return "layer " + std::to_string(layer) + ": with stage-local names (Megatron-FSDP, pp " +
           std::to_string(m_stageEnds.size()) + ") every stage asks for decoder.layers.0-" +
           std::to_string(m_maxStageLayers - 1) + ", so no stage reads it";
}

std::string Differ::untiedOutputNote(std::string_view key) const
{
    for (const std::string &emb : detail::tiedEmbeddingsOf(key))
        if (m_byName.count(emb))
            return "the checkpoint's output layer has weights of its own (saved untied); "
                   "this model ties it to " +
                   emb +
                   " and does not load it: build the model untied (tie_word_embeddings: "
                   "false, --untie-embeddings-and-output-weights) to keep them";
    return {};
}

bool Differ::optimizerStateOfKnownParam(std::string_view key)
{
    std::string_view rest = key.substr(16);
    const size_t first = rest.find('.');
    if (first != std::string_view::npos && kKnownStates.count(std::string(rest.substr(0, first))))
        rest = rest.substr(first + 1);
    else if (const size_t last = rest.rfind('.'); last != std::string_view::npos)
        rest = rest.substr(0, last);
    while (rest.starts_with("module."))
        rest = rest.substr(7);
    if (m_byName.count(std::string(rest)))
        return true;
    if (m_stackedNames.empty()) { // stacked: any layer of that name (built once)
        static const std::regex layer(R"(\.layers\.\d+\.)");
        for (const Expanded &x : m_params) {
            m_stackedNames.insert(std::regex_replace(x.param.name, layer, ".layers."));
            if (m_torchDist) // torch_dist's sharded keys, in whichever form they were saved
                for (const TorchDistForm f : {TorchDistForm{true, true}, TorchDistForm{false, true},
                                              TorchDistForm{false, false}})
                    m_stackedNames.insert(shardedName(x.param.name, f).key);
        }
    }
    return m_stackedNames.count(std::string(rest)) > 0;
}

bool Differ::legacyUnconsumed(std::string_view key, std::string &note) const
{
    const size_t slash = key.find('/');
    if (slash == std::string_view::npos || !key.substr(slash).starts_with("/model"))
        return false;
    const std::string dir(key.substr(0, slash));
    if (m_legacyDirsRead.count(dir))
        return true;
    int tp = 0;
    if (std::sscanf(dir.c_str(), "mp_rank_%d", &tp) == 1 && tp < m_layout.parallel.tp) {
        const std::string first = "mp_rank_00" + dir.substr(std::min<size_t>(10, dir.size()));
        if (m_legacyDirsRead.count(first))
            return false; // TP rank `tp` reads it; rank 0's copy stands for it
    }
    note = "in " + dir +
           "/model_optim_rng.pt, which no rank of the model's parallel "
           "configuration (tp " +
           std::to_string(m_layout.parallel.tp) + ", pp " + std::to_string(m_layout.parallel.pp) +
           ", ep " + std::to_string(m_layout.parallel.ep) + ") reads";
    return true;
}

std::string Differ::globalShapeMismatch(const DiffResult &r) const
{
    if (!m_torchDist)
        return {};
    // A requested stacked key whose stacked axes the checkpoint keeps at other sizes (layers
    // or experts): the request names the key's whole shape, the stored key has its own.
    for (const DiffEntry &e : r.entries) {
        if (e.section != Section::Model)
            continue;
        for (const DiffSource &row : e.requestRows) {
            if (row.index.empty())
                continue;
            const auto s = std::find_if(e.sources.begin(), e.sources.end(),
                                        [&](const DiffSource &x) { return x.key == row.key; });
            if (s == e.sources.end() || s->shape.size() != row.shape.size())
                continue;
            if (std::equal(row.shape.begin(), row.shape.begin() + std::ptrdiff_t(row.index.size()),
                           s->shape.begin()))
                continue;
            std::string loaded = "torch.Size([", expected = "(";
            for (size_t d = 0; d < s->shape.size(); ++d) {
                loaded += (d ? ", " : "") + std::to_string(s->shape[d]);
                expected += (d ? ", " : "") + std::to_string(row.shape[d]);
            }
            loaded += "])";
            expected += s->shape.size() == 1 ? ",)" : ")";
            return "CheckpointingException: Global shape mismatch for loaded (" + loaded +
                   ") and expected (" + expected + ") tensor for key " + row.key;
        }
    }
    return {};
}

} // namespace shardscope::detail
