// SPDX-License-Identifier: MIT
// torch_dist's sharded keys: what megatron-core's sharded_state_dict calls each parameter, in the
// form the load asks for (docs/formats.md §5.3.2). TransformerBlock stacks its layers under one
// key with a layer axis unless the block is not homogeneous; SequentialMLP and TEGroupedMLP stack
// a layer's routed experts under `mlp.experts.experts.linear_fcN.*` with an expert axis unless
// the sharded state dict is built with singleton_local_shards, which also keys each expert (and
// every layer) apart and keeps SwiGLU's halves as `_w` / `_v`. A resume builds its request with
// the checkpoint's own content metadata (Megatron-LM's and Megatron-Bridge's load_checkpoint).
#include "diff/differ.h"

#include <cctype>
#include <optional>
#include <string_view>

namespace shardscope::detail {

namespace {

// A decoder layer in a name: where `…decoder.layers.` ends, the index, where the rest begins.
struct LayerAt
{
    size_t prefixEnd = 0;
    int64_t index = -1;
    size_t rest = 0;
};

std::optional<LayerAt> layerAt(std::string_view name)
{
    static constexpr std::string_view kBlock = "decoder.layers.";
    for (size_t at = name.find(kBlock); at != std::string_view::npos;
         at = name.find(kBlock, at + 1)) {
        if (at > 0 && name[at - 1] != '.')
            continue;
        size_t i = at + kBlock.size(), digits = i;
        while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
            ++i;
        if (i == digits || i >= name.size() || name[i] != '.' || i - digits > 9)
            continue;
        return LayerAt{at + kBlock.size(), std::stoll(std::string(name.substr(digits, i - digits))),
                       i + 1};
    }
    return std::nullopt;
}

// Digits at `at` (at most 9): their value and where they end; -1 when none.
int64_t digitsAt(std::string_view s, size_t &at)
{
    const size_t start = at;
    while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at])) && at - start < 9)
        ++at;
    return at == start ? -1 : std::stoll(std::string(s.substr(start, at - start)));
}

// A routed expert's leaf in a name's tail after `.mlp.experts.`: sequential
// `local_experts.<e>.linear_fcN.<leaf>` or grouped `linear_fcN.<leaf><e>`, where leaf is
// weight, bias or _extra_state, and a SwiGLU half `_w` / `_v` may follow.
struct ExpertLeaf
{
    int64_t expert = -1;
    char fc = 0;
    std::string leaf; ///< "weight_w", "bias", "_extra_state", …
};

std::optional<ExpertLeaf> expertLeaf(std::string_view tail)
{
    ExpertLeaf x;
    size_t at = 0;
    static constexpr std::string_view kLocal = "local_experts.", kFc = "linear_fc";
    const bool sequential = tail.starts_with(kLocal);
    if (sequential) {
        at = kLocal.size();
        x.expert = digitsAt(tail, at);
        if (x.expert < 0 || at >= tail.size() || tail[at] != '.')
            return std::nullopt;
        ++at;
    }
    if (tail.substr(at).size() < kFc.size() + 2 || !tail.substr(at).starts_with(kFc))
        return std::nullopt;
    at += kFc.size();
    x.fc = tail[at];
    if ((x.fc != '1' && x.fc != '2') || tail[at + 1] != '.')
        return std::nullopt;
    at += 2;
    for (std::string_view base : {"weight", "bias", "_extra_state"}) {
        if (!tail.substr(at).starts_with(base))
            continue;
        size_t after = at + base.size();
        if (!sequential) {
            x.expert = digitsAt(tail, after);
            if (x.expert < 0)
                return std::nullopt;
        }
        const std::string_view suffix = tail.substr(after);
        if (!suffix.empty() && suffix != "_w" && suffix != "_v")
            return std::nullopt;
        x.leaf = std::string(base) + std::string(suffix);
        return x;
    }
    return std::nullopt;
}

} // namespace

void Differ::setUpTorchDist()
{
    if (!m_torchDist)
        return;
    const auto it = m_index.info.find("megatron.content_metadata.singleton_local_shards");
    m_singleton = it != m_index.info.end() && it->second == "True";
    for (const Expanded &x : m_params) {
        if (const auto l = layerAt(x.param.name)) {
            int64_t &n = m_blockLayers[x.param.name.substr(0, l->prefixEnd)];
            n = std::max(n, l->index + 1);
        }
        m_experts = std::max<int64_t>(m_experts, x.param.expert + 1);
        if (const size_t ex = x.param.name.find(".mlp.experts."); ex != std::string::npos)
            if (const auto leaf = expertLeaf(std::string_view(x.param.name).substr(ex + 13)))
                m_experts = std::max(m_experts, leaf->expert + 1);
    }
    if (m_layout.numExperts > 0)
        m_experts = m_layout.numExperts;
    m_form.expertsStacked = !m_singleton;
    if (m_singleton) {
        m_form.layersStacked = false;
        m_layersWhy = "the checkpoint's content metadata sets singleton_local_shards, which "
                      "keys every layer and expert apart";
    } else if (!enabled("torch_dist_stacked")) {
        m_form.layersStacked = false;
        m_layersWhy = "rule torch_dist_stacked is off: a block that is not homogeneous";
    } else if (m_layout.torchDistLayers != Layout::LayerKeys::Unknown) {
        m_form.layersStacked = m_layout.torchDistLayers == Layout::LayerKeys::Stacked;
        m_layersWhy = "the layout: " +
                      (m_layout.torchDistLayersWhy.empty()
                           ? std::string(m_form.layersStacked ? "a homogeneous block"
                                                              : "a block that is not homogeneous")
                           : m_layout.torchDistLayersWhy);
    } else {
        m_form.layersStacked = m_sorted->stackedLayers;
        m_layersAssumed = true;
        m_layersWhy = "assumed as the checkpoint stores them: the layout does not say whether "
                      "the model's block is homogeneous (a layout from shardscope-cli layout or "
                      "tools/export_layout.py says)";
    }
}

Differ::ShardedName Differ::shardedName(const std::string &name, TorchDistForm form) const
{
    ShardedName s;
    s.key = name;
    if (const auto l = layerAt(s.key); l && form.layersStacked) {
        const std::string prefix = s.key.substr(0, l->prefixEnd);
        const auto count = m_blockLayers.find(prefix);
        s.lead.push_back(l->index);
        s.leadSizes.push_back(count == m_blockLayers.end() ? l->index + 1 : count->second);
        s.key = prefix + s.key.substr(l->rest);
    }
    static constexpr std::string_view kExperts = ".mlp.experts.";
    const size_t ex = s.key.find(kExperts);
    if (ex == std::string::npos)
        return s;
    const auto x = expertLeaf(std::string_view(s.key).substr(ex + kExperts.size()));
    if (!x)
        return s;
    std::string key = s.key.substr(0, ex + kExperts.size()) + "experts.";
    if (form.expertsStacked) {
        s.lead.push_back(x->expert);
        s.leadSizes.push_back(std::max(m_experts, x->expert + 1));
    } else {
        key += std::to_string(x->expert) + ".";
    }
    s.key = key + "linear_fc" + x->fc + "." + x->leaf;
    return s;
}

std::vector<Differ::TorchDistForm> Differ::lookupForms() const
{
    std::vector<TorchDistForm> forms{m_form};
    if (scratch().anyForm || m_options.everyRule)
        for (const TorchDistForm f :
             {TorchDistForm{true, true}, TorchDistForm{false, true}, TorchDistForm{false, false}})
            if (!(f == m_form))
                forms.push_back(f);
    return forms;
}

bool Differ::lookupTorchDist(const Request &q, const std::string &state,
                             std::vector<DiskKey *> &found)
{
    scratch().otherForm = false;
    scratch().storedForm = {m_form.layersStacked, m_form.expertsStacked};
    const std::vector<TorchDistForm> forms = lookupForms();
    for (const Piece &piece : q.pieces) {
        DiskKey *k = nullptr;
        std::vector<int64_t> lead;
        for (const TorchDistForm &f : forms) {
            ShardedName sn = shardedName(piece.name, f);
            DiskKey *c = find(sn.key, state);
            if (!c || !c->tensor || c->tensor->shape.size() < sn.lead.size())
                continue;
            bool inside = true;
            for (size_t i = 0; i < sn.lead.size(); ++i)
                inside = inside && sn.lead[i] < c->tensor->shape[i];
            if (!inside)
                continue;
            k = c;
            lead = std::move(sn.lead);
            if (!(f == m_form)) {
                scratch().otherForm = true;
                scratch().storedForm = {f.layersStacked, f.expertsStacked};
            }
            break;
        }
        if (!k)
            return false;
        found.push_back(k);
        scratch().lead.push_back(std::move(lead));
    }
    return true;
}

std::string Differ::formText(TorchDistForm f) const
{
    return std::string(f.layersStacked ? "layers stacked" : "a key per layer") + ", " +
           (f.expertsStacked ? "experts stacked" : "a key per expert");
}

void Differ::formMismatch(DiffEntry &e, const std::vector<DiskKey *> &found,
                          bool swigluHalves) const
{
    const TorchDistForm stored =
        scratch().otherForm ? TorchDistForm{scratch().storedForm.first, scratch().storedForm.second}
                            : m_form;
    std::string saved, build;
    if (swigluHalves && stored.expertsStacked == m_form.expertsStacked) {
        saved = m_singleton ? "SwiGLU's [W; V] in one key, where singleton_local_shards (the "
                              "checkpoint's content metadata) asks for the halves apart"
                            : "SwiGLU's halves apart (saved with singleton_local_shards), which "
                              "its content metadata does not say";
        build = "re-save it with the content metadata it was saved with";
    }
    if (stored.layersStacked != m_form.layersStacked) {
        saved += std::string(saved.empty() ? "" : "; ") +
                 (stored.layersStacked
                      ? "saved by a homogeneous block (its layers stacked under one key)"
                      : "saved by a block that is not homogeneous (a key per layer)");
        build = stored.layersStacked
                    ? "build the model's block homogeneous, as the saving run's was (an int "
                      "moe_layer_freq of 1, no hetereogenous_dist_checkpoint)"
                    : "build the model's block as the saving run's (moe_layer_freq as a list, "
                      "or hetereogenous_dist_checkpoint)";
    }
    if (stored.expertsStacked != m_form.expertsStacked) {
        saved += std::string(saved.empty() ? "" : "; ") +
                 (stored.expertsStacked
                      ? "its experts stacked under one key"
                      : "saved with singleton_local_shards (a key per expert, SwiGLU's halves "
                        "apart), which its content metadata does not say");
        if (build.empty())
            build = "re-save it with the content metadata it was saved with";
    }
    e.status = LoadStatus::Unloadable;
    e.reason =
        "the checkpoint stores it as " + std::string(found.front()->key) +
        (found.size() > 1 ? " (+" + std::to_string(found.size() - 1) + " more)" : std::string()) +
        (saved.empty() ? std::string() : ", " + saved) + "; megatron-core asks for " +
        e.requestKeys.front() + " (" + formText(m_form) + ": " + m_layersWhy +
        "), which is not there";
    e.fix =
        "Repair it: shardscope-cli fix writes the keys in the form this load asks for, "
        "beside the checkpoint; or " +
        (build.empty() ? std::string("load with the model the checkpoint was saved from") : build) +
        ".";
}

} // namespace shardscope::detail
