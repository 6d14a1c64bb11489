// SPDX-License-Identifier: MIT
// Matching a parameter's stored keys through the rules: the request the loader makes
// (rulemap.h), its lookup among the stored keys (plain, stacked, TP-local), and the mappings only
// ShardScope makes, tried in kOtherNameRules' order. A new rule: its entry in rules.cpp's table,
// its request in rulemap.cpp or its function and kOtherNameRules entry here.
#include "diff/differ.h"

#include "common/shapes.h"
#include "diff/causes.h"
#include "shardscope/escape.h"

#include <algorithm>
#include <map>
#include <regex>

namespace shardscope::detail {

bool Differ::byLoader(const std::string &rule)
{
    for (const RuleInfo &r : allRules())
        if (r.name == rule)
            return r.appliedByLoader;
    return false;
}

Request Differ::request(const LayoutParam &p, bool allRules, std::optional<bool> swigluHalves) const
{
    auto on = [&](const std::string &rule) {
        return allRules ||
               (enabled(rule) && (m_megatronLoader || m_options.everyRule || !byLoader(rule)));
    };
    // torch_dist keeps SwiGLU's [W; V] in one key, unless singleton_local_shards keeps the
    // halves apart.
    const bool halves = swigluHalves.value_or(m_singleton);
    Request q = detail::loaderRequest(p, m_layout, m_torchDist && !halves, on);
    // The local spec (no Transformer Engine) of a layer with linear_qkv keeps its norms
    // under TE's names in torch_dist: its sharded_state_dict_keys_map.
    if (m_torchDist && !m_layout.transformerEngine && on("local_spec_keys_map"))
        for (Piece &piece : q.pieces) {
            static const std::regex norm(
                R"(^(.*\.layers\.\d+\.)(input_layernorm|pre_mlp_layernorm)\.(weight|bias)$)");
            std::smatch m;
            if (!std::regex_match(piece.name, m, norm) ||
                !m_byName.count(m[1].str() + "self_attention.linear_qkv.weight"))
                continue;
            piece.name = m[1].str() +
                         (m[2] == "input_layernorm" ? "self_attention.linear_qkv.layer_norm_"
                                                    : "mlp.linear_fc1.layer_norm_") +
                         m[3].str();
            q.rules.push_back("local_spec_keys_map");
            q.renamed = true;
        }
    return q;
}

DiskKey *Differ::find(const std::string &name, const std::string &state)
{
    return state.empty() ? m_disk.findModel(name)
                         : m_disk.findOptimizer(name, state, scratch().key);
}

std::string Differ::requestKey(const std::string &name, const std::string &state) const
{
    if (state.empty())
        return m_disk.modelWrapper + name;
    return m_disk.optimizerWrapper + name + "." + state;
}

void Differ::setRequest(DiffEntry &e, const Request &q, const std::string &state) const
{
    e.requestKeys.clear();
    e.requestRows.clear();
    if (m_torchDist) {
        // Megatron's sharded keys: a stacked key's row says where on its stacked axes the piece
        // goes, and the key's whole shape (those axes first).
        std::vector<ShardedName> names;
        bool stacked = false;
        for (const Piece &piece : q.pieces) {
            names.push_back(shardedName(piece.name, m_form));
            stacked = stacked || !names.back().lead.empty();
            e.requestKeys.push_back(requestKey(names.back().key, state));
        }
        if (q.pieces.size() > 1 || stacked)
            for (size_t i = 0; i < q.pieces.size(); ++i) {
                const Piece &piece = q.pieces[i];
                std::vector<int64_t> shape = names[i].leadSizes;
                if (state != "step")
                    shape.insert(shape.end(), piece.shape.begin(), piece.shape.end());
                e.requestRows.push_back({e.requestKeys[i],
                                         std::move(shape),
                                         {},
                                         piece.dim,
                                         piece.begin,
                                         piece.end,
                                         0,
                                         std::move(names[i].lead),
                                         -1});
            }
        return;
    }
    for (const Piece &piece : q.pieces)
        e.requestKeys.push_back(requestKey(piece.name, state));
    if (q.pieces.size() > 1)
        for (const Piece &piece : q.pieces)
            e.requestRows.push_back({requestKey(piece.name, state),
                                     piece.shape,
                                     {},
                                     piece.dim,
                                     piece.begin,
                                     piece.end,
                                     0,
                                     {},
                                     -1});
}

bool Differ::lookup(const Request &q, const std::string &state, std::vector<DiskKey *> &found)
{
    found.clear();
    scratch().lead.clear();
    if (m_torchDist)
        return lookupTorchDist(q, state, found);
    for (const Piece &piece : q.pieces) {
        std::vector<int64_t> lead;
        DiskKey *k = find(piece.name, state);
        if ((!k || !k->tensor) && m_sorted->mayBeStacked && enabled("torch_dist_stacked"))
            k = findStacked(piece.name, state, lead);
        if (!k || !k->tensor)
            return false;
        found.push_back(k);
        scratch().lead.push_back(std::move(lead));
    }
    return true;
}

DiskKey *Differ::findStacked(const std::string &name, const std::string &state,
                             std::vector<int64_t> &lead)
{
    static const std::regex layer(R"(\.layers\.(\d+)\.)");
    static const std::regex expert(R"(\.mlp\.experts\.linear_fc([12])\.(weight|bias)(\d+)$)");
    std::smatch m;
    std::optional<std::pair<int64_t, std::string>> byLayer, byExpert; // index, stacked name
    if (std::regex_search(name, m, layer))
        byLayer = {std::stoll(m[1].str()), m.prefix().str() + ".layers." + m.suffix().str()};
    // SequentialMLP's local_experts.<e>.linear_fcN stack under the same key as the grouped
    // form: megatron-core's sharded state dicts make the two interchangeable.
    static const std::regex sequential(
        R"(\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.(weight|bias)$)");
    auto expertStack = [&](const std::string &n) -> std::optional<std::pair<int64_t, std::string>> {
        std::smatch e;
        if (std::regex_search(n, e, expert))
            return std::pair{std::stoll(e[3].str()), e.prefix().str() +
                                                         ".mlp.experts.experts.linear_fc" +
                                                         e[1].str() + "." + e[2].str()};
        if (std::regex_search(n, e, sequential))
            return std::pair{std::stoll(e[1].str()), e.prefix().str() +
                                                         ".mlp.experts.experts.linear_fc" +
                                                         e[2].str() + "." + e[3].str()};
        return std::nullopt;
    };
    byExpert = expertStack(name);
    std::vector<std::pair<std::vector<int64_t>, std::string>> tries;
    if (byLayer) {
        if (auto both = expertStack(byLayer->second))
            tries.push_back({{byLayer->first, both->first}, both->second});
        tries.push_back({{byLayer->first}, byLayer->second});
    }
    if (byExpert)
        tries.push_back({{byExpert->first}, byExpert->second});
    for (auto &[indices, stacked] : tries) {
        DiskKey *k = find(stacked, state);
        if (!k || !k->tensor || k->tensor->shape.size() < indices.size())
            continue;
        bool inside = true;
        for (size_t i = 0; i < indices.size(); ++i)
            inside = inside && indices[i] < k->tensor->shape[i];
        if (!inside)
            continue;
        lead = indices;
        return k;
    }
    lead.clear();
    return nullptr;
}

void Differ::fillSources(DiffEntry &e, const Request &q, const std::vector<DiskKey *> &found)
{
    for (size_t i = 0; i < found.size(); ++i) {
        DiskKey *k = found[i];
        mark(k->used);
        DiffSource src{std::string(k->key),
                       k->tensor->shape.toVector(),
                       k->tensor->dtypeName,
                       q.pieces[i].dim,
                       q.pieces[i].begin,
                       q.pieces[i].end,
                       0,
                       {},
                       entryOf(k)};
        if (i < scratch().lead.size())
            src.index = scratch().lead[i];
        e.sources.push_back(std::move(src));
    }
    if (std::any_of(scratch().lead.begin(), scratch().lead.end(),
                    [](const auto &l) { return !l.empty(); }) &&
        std::find(e.rules.begin(), e.rules.end(), "torch_dist_stacked") == e.rules.end())
        e.rules.push_back("torch_dist_stacked");
}

namespace {

// The mappings only ShardScope makes, in the order they are tried (the first that explains a
// parameter wins). `modelOnly`: not tried for optimizer states.
struct OtherNameRule
{
    const char *rule; // rules.cpp's name; nullptr: always on
    bool modelOnly;
    bool (Differ::*match)(DiffEntry &, const LayoutParam &, const Request &, const std::string &);
};

} // namespace

bool Differ::matchOtherNames(DiffEntry &e, const LayoutParam &p, const Request &q,
                             const std::string &state)
{
    static constexpr OtherNameRule kOtherNameRules[] = {
        {"mtp_spelling", false, &Differ::mtpSpelling},
        {"experts_form", false, &Differ::expertsForm},
        {"fused_on_disk", false, &Differ::fusedOnDisk},
        {"saved_prefix", true, &Differ::savedPrefix},
        {"key_prefix", false, &Differ::keyPrefix},
        {"tied_output", true, &Differ::tiedOutput},
        {"optimizer_index", false, &Differ::optimizerIndex},
        {"peft_base_layer", false, &Differ::peftBaseLayer},
        {nullptr, true, &Differ::listedButUnreadable},
    };
    for (const OtherNameRule &r : kOtherNameRules)
        if ((!r.rule || enabled(r.rule)) && (!r.modelOnly || state.empty()) &&
            (this->*r.match)(e, p, q, state))
            return true;
    return false;
}

template<typename Rename>
bool Differ::underOtherNames(DiffEntry &e, const Request &q, const std::string &state,
                             const char *rule, Rename rename, const std::string &why,
                             const std::string &fix)
{
    Request alt = q;
    bool changed = false;
    for (Piece &piece : alt.pieces) {
        std::string n = rename(piece.name);
        changed = changed || n != piece.name;
        piece.name = std::move(n);
    }
    std::vector<DiskKey *> found;
    if (!changed || !lookup(alt, state, found))
        return false;
    e.rules = q.rules;
    e.rules.push_back(rule);
    fillSources(e, alt, found);
    judge(e, alt, found, state, LoadStatus::Rename);
    e.realLoadFills = false;
    if (e.status == LoadStatus::Rename) {
        e.reason = "stored as " + std::string(found.front()->key) + " (" + why +
                   "); the load asks for " + e.requestKeys.front();
        e.fix = fix;
    }
    return true;
}

bool Differ::mtpSpelling(DiffEntry &e, const LayoutParam &, const Request &q,
                         const std::string &state)
{
    const std::string from = ".transformer_layer.", to = "." + m_layout.mtpInner + ".";
    return underOtherNames(
        e, q, state, "mtp_spelling",
        [&](const std::string &n) { return detail::mtpSpelledName(n, m_layout.mtpInner); },
        "MTP inner layer spelled '" + m_layout.mtpInner + "'",
        // The names come from the layout: quoted for the shell the user pastes this into.
        "checkpoint_inspector.py modify-state-dict IN OUT --op " +
            shellQuote("rename " + replaceAll(to, ".", "\\.") + " " + from));
}

std::string Differ::unwrappedName(std::string_view key)
{
    static constexpr std::string_view kInner[] = {"_orig_mod.", "_fsdp_wrapped_module.",
                                                  "_checkpoint_wrapped_module."};
    std::string s(key);
    for (std::string_view w : kInner)
        for (size_t at = s.find(w); at != std::string::npos; at = s.find(w, at))
            if (at == 0 || s[at - 1] == '.')
                s.erase(at, w.size());
            else
                ++at;
    while (s.starts_with("module."))
        s.erase(0, 7);
    return s;
}

void Differ::findWrappers()
{
    std::call_once(m_unwrappedOnce, [&] {
        for (uint32_t i : m_disk.modelKeys) {
            std::string_view name = m_disk.keys[i].key;
            if (name.starts_with(m_disk.modelWrapper))
                name.remove_prefix(m_disk.modelWrapper.size());
            if (std::string u = unwrappedName(name); u != name)
                m_unwrapped.emplace(std::move(u), std::string(name));
        }
    });
    std::call_once(m_keyPrefixOnce, [&] {
        // Legacy keys name their rank file first (mp_rank_00/model.…): no common prefix.
        if (m_legacy)
            return;
        // The names under the checkpoint's own wrapper (DCP's top-level `model.`,
        // fsdp_dtensor's `model.module.`), as the look-ups take them.
        std::vector<std::string_view> stored, wanted;
        for (uint32_t i : m_disk.modelKeys) {
            std::string_view name = m_disk.keys[i].key;
            if (name.starts_with(m_disk.modelWrapper))
                name.remove_prefix(m_disk.modelWrapper.size());
            stored.push_back(name);
        }
        for (const Expanded &x : m_params)
            wanted.push_back(x.param.name);
        m_keyPrefix = detail::commonKeyPrefix(stored, wanted);
    });
}

std::vector<std::pair<std::string, const char *>> Differ::wrappedNames(const std::string &name)
{
    findWrappers();
    std::vector<std::pair<std::string, const char *>> out;
    if (enabled("saved_prefix"))
        if (auto it = m_unwrapped.find(name); it != m_unwrapped.end())
            out.emplace_back(it->second, "saved_prefix");
    if (enabled("key_prefix") && m_keyPrefix)
        if (std::string n = m_keyPrefix->storedName(name); n != name)
            out.emplace_back(std::move(n), "key_prefix");
    return out;
}

bool Differ::savedPrefix(DiffEntry &e, const LayoutParam &, const Request &q,
                         const std::string &state)
{
    findWrappers();
    if (m_unwrapped.empty())
        return false;
    const bool found = underOtherNames(
        e, q, state, "saved_prefix",
        [&](const std::string &n) {
            auto it = m_unwrapped.find(n);
            return it == m_unwrapped.end() ? n : it->second;
        },
        "", "");
    if (found && e.status == LoadStatus::Rename && !e.sources.empty()) {
        // Which wrappers, as the user knows them.
        const std::string &stored = e.sources.front().key;
        std::vector<std::string> by;
        if (stored.starts_with("module.") || stored.starts_with(m_disk.modelWrapper + "module."))
            by.push_back("DDP / DataParallel (module.)");
        for (const auto &[w, who] : {std::pair{"_orig_mod.", "torch.compile"},
                                     {"_fsdp_wrapped_module.", "FSDP"},
                                     {"_checkpoint_wrapped_module.", "checkpoint_wrapper"}})
            if (stored.find(w) != std::string::npos)
                by.push_back(std::string(who) + " (" + w + ")");
        std::string list;
        for (size_t i = 0; i < by.size(); ++i)
            list += (i == 0 ? "" : i + 1 == by.size() ? " and " : ", ") + by[i];
        e.reason = "stored as " + stored + ": saved through " + list +
                   ", whose names the load does not strip; it asks for " + e.requestKeys.front();
        const std::string &want = e.requestKeys.front();
        const std::string prefix = stored.size() > want.size() && stored.ends_with(want)
                                       ? stored.substr(0, stored.size() - want.size())
                                       : std::string();
        e.fix = "Strip the wrapper from the names before loading (" +
                (prefix.empty() ? std::string("remove its components from each key")
                                : "torch.nn.modules.utils.consume_prefix_in_state_dict_if_"
                                  "present(state_dict, '" +
                                      prefix + "') strips prefix '" + prefix + "'") +
                "), or save the unwrapped module's state_dict (model.module, "
                "model._orig_mod); shardscope-cli fix writes a copy under the model's names.";
    }
    return found;
}

bool Differ::keyPrefix(DiffEntry &e, const LayoutParam &, const Request &q,
                       const std::string &state)
{
    findWrappers();
    if (!m_keyPrefix)
        return false;
    const detail::KeyPrefix &kp = *m_keyPrefix;
    const std::string quoted = "'" + kp.prefix + "'";
    const bool found = underOtherNames(
        e, q, state, "key_prefix", [&](const std::string &n) { return kp.storedName(n); },
        kp.stored
            ? "every stored key carries the prefix " + quoted + ", which the model's names do not"
            : "the model's names carry the prefix " + quoted + ", which the stored keys do not",
        kp.stored ? "Strip prefix " + quoted +
                        " from every key (torch.nn.modules.utils.consume_prefix_in_state_dict_if_"
                        "present(state_dict, " +
                        quoted +
                        ")), or load into the module that was saved; shardscope-cli fix "
                        "writes a copy under the model's names."
                  : "Add prefix " + quoted + " to every key ({" + quoted +
                        " + k: v for k, v in state_dict.items()}), or load it into the submodule "
                        "that was saved (model." +
                        kp.prefix.substr(0, kp.prefix.size() - 1) +
                        ".load_state_dict(state_dict)); shardscope-cli fix writes a copy under the "
                        "model's names.");
    return found;
}

bool Differ::tiedOutput(DiffEntry &e, const LayoutParam &p, const Request &q,
                        const std::string &state)
{
    if (q.pieces.size() != 1)
        return false;
    for (const std::string &emb : detail::tiedEmbeddingsOf(p.name)) {
        const DiskKey *k = m_disk.findModel(emb);
        if (!k || !k->tensor || k->tensor->shape != q.pieces[0].shape)
            continue;
        return underOtherNames(
            e, q, state, "tied_output", [&](const std::string &) { return emb; },
            "the checkpoint was saved with the output layer tied to the embedding: one "
            "tensor, stored once; this model unties them",
            "Build the model with tied embeddings (tie_word_embeddings: true; Megatron: "
            "without --untie-embeddings-and-output-weights), or give the output layer its "
            "own copy of " +
                emb +
                " (shardscope-cli fix writes it over the same bytes): the untied output "
                "layer then starts from the embedding's values, as the saving run used it.");
    }
    return false;
}

bool Differ::listedButUnreadable(DiffEntry &e, const LayoutParam &, const Request &q,
                                 const std::string &)
{
    const auto it = m_keyProblems.find(q.pieces.front().name);
    if (it == m_keyProblems.end())
        return false;
    const Problem &pr = *it->second;
    const auto slash = pr.file.find_last_of('/');
    const std::string file = pr.file.substr(slash == std::string::npos ? 0 : slash + 1);
    e.realLoadFills = false;
    if (pr.effect != Problem::Effect::Unreadable) { // the shard reads, without this key
        e.status = LoadStatus::Unloadable;
        e.reason = q.pieces.front().name + ": the index lists it in " + file +
                   ", which does not hold it (" + pr.file + ")";
        e.fix = "The shard is not the one the index was written with (another save's, or "
                "rewritten without this key): restore that shard, or write the index anew "
                "from what the shards hold (shardscope-cli inspect lists it).";
        return true;
    }
    // A shard index's key, or the entry of one file whose bytes cannot be read.
    const bool sharded =
        m_index.format == Format::SafetensorsIndex || m_index.format == Format::TorchSaveIndex;
    e.status = LoadStatus::Unreadable;
    e.reason = q.pieces.front().name + ": " +
               (sharded ? "the index lists it in " + file : file + " lists it") + ": " +
               pr.message + "; the load raises opening it (" + pr.file + ")";
    e.fix = "Restore " + file + " (a download or copy that stopped early: fetch " +
            (sharded ? "the shard" : "it") + " again), or load another copy of the checkpoint.";
    return true;
}

bool Differ::expertsForm(DiffEntry &e, const LayoutParam &, const Request &q,
                         const std::string &state)
{
    return underOtherNames(
        e, q, state, "experts_form", detail::otherExpertForm,
        "the other expert form: grouped vs sequential",
        "Build the model with the expert form the checkpoint was saved with "
        "(--moe-grouped-gemm for linear_fc1.weight<e>, without it for local_experts.<e>.), "
        "or rename the keys with checkpoint_inspector.py modify-state-dict --op \"rename "
        "OLD NEW\".");
}

bool Differ::fusedOnDisk(DiffEntry &e, const LayoutParam &p, const Request &q,
                         const std::string &state)
{
    std::vector<DiskKey *> found;
    // a) a fused parameter, stored fused
    if (p.fusion || !p.absorbs.empty()) {
        for (const std::string &inner :
             {std::string(".transformer_layer."), "." + m_layout.mtpInner + "."}) {
            Request whole;
            whole.pieces.push_back(
                {replaceAll(p.name, "." + m_layout.mtpInner + ".", inner), p.shape, 0, 0, 0});
            const char *wrapper = nullptr;
            if (!lookup(whole, state, found)) {
                // Stored whole under a wrapper's prefix (saved through DDP): asked for as its
                // sections, which no single rule finds.
                if (q.pieces.size() < 2)
                    continue;
                const std::string plain = whole.pieces.front().name;
                for (auto &[name, rule] : wrappedNames(plain)) {
                    whole.pieces.front().name = name;
                    if (lookup(whole, state, found)) {
                        wrapper = rule;
                        break;
                    }
                }
                if (!wrapper)
                    continue;
            }
            e.rules = {"fused_on_disk"};
            if (wrapper)
                e.rules.push_back(wrapper);
            fillSources(e, whole, found);
            judge(e, whole, found, state, LoadStatus::Merge);
            if (e.status == LoadStatus::Merge) {
                const std::string rule = p.fusion ? p.fusion->rule : "mla_down_proj";
                e.reason = "stored fused as " + std::string(found.front()->key) +
                           " (saved without the " + rule + " split); the load asks for " +
                           e.requestKeys.front() +
                           (e.requestKeys.size() > 1 ? " and its other sections" : "");
                e.fix = "Re-save the checkpoint with a Megatron-LM whose save runs " +
                        handlerOf(rule) +
                        " (or convert torch_dist checkpoints with checkpoint_inspector.py "
                        "convert-torch-dist-to-fsdp-dtensor" +
                        (rule == "swiglu" ? std::string(" --swiglu") : std::string()) +
                        "); ShardScope can cut the sections out of the fused tensor.";
            }
            return true;
        }
    }
    // b) an unfused parameter that is a section of a stored fused tensor
    struct Family
    {
        std::vector<std::string> parts;
        std::string fused;
    };
    static const std::vector<Family> families = {
        {{".self_attention.linear_q_down_proj.weight",
          ".self_attention.linear_kv_down_proj.weight"},
         ".self_attention.linear_qkv_down_proj.weight"},
        {{".weight_w", ".weight_v"}, ".weight"},
        {{".bias_w", ".bias_v"}, ".bias"},
        {{".weight.query", ".weight.key", ".weight.value", ".weight.z", ".weight.beta",
          ".weight.alpha"},
         ".weight"},
    };
    const std::string name = q.pieces.size() == 1 ? q.pieces.front().name : std::string();
    if (name.empty())
        return false;
    // The absorbed input norm of a fused MLA down projection.
    if (name.ends_with(".input_layernorm.weight")) {
        const std::string layer = name.substr(0, name.size() - 23);
        Request alt;
        alt.pieces.push_back(
            {layer + ".self_attention.linear_qkv_down_proj.layer_norm_weight", p.shape, 0, 0, 0});
        if (lookup(alt, state, found)) {
            e.rules = {"fused_on_disk"};
            fillSources(e, alt, found);
            judge(e, alt, found, state, LoadStatus::Rename);
            e.realLoadFills = false;
            e.reason = "stored as " + std::string(found.front()->key) +
                       " (the norm absorbed into the fused down projection)";
            e.fix = "Build the model with the fused MLA down projection "
                    "(--mla-down-proj-fusion) to load this checkpoint, or re-save it with "
                    "a Megatron-LM that runs " +
                    handlerOf("mla_down_proj") + ".";
            return true;
        }
    }
    // SwiGLU halves of grouped experts: linear_fc1.weight<e>_w / _v ↔ linear_fc1.weight<e>.
    static const std::regex gluHalf(R"(^(.*\.(weight|bias)\d*)_([wv])$)");
    std::smatch glu;
    std::vector<Family> local = families;
    if (std::regex_match(name, glu, gluHalf) && !glu[1].str().ends_with(".weight") &&
        !glu[1].str().ends_with(".bias")) {
        const std::string tail = glu[1].str().substr(glu[1].str().rfind('.'));
        local.push_back({{tail + "_w", tail + "_v"}, tail});
    }
    for (const Family &f : local) {
        for (size_t i = 0; i < f.parts.size(); ++i) {
            if (!name.ends_with(f.parts[i]))
                continue;
            const std::string stem = name.substr(0, name.size() - f.parts[i].size());
            DiskKey *k = find(stem + f.fused, state);
            const char *wrapper = nullptr;
            // The fused key saved under a wrapper's prefix (DDP's module.).
            if (!k || !k->tensor)
                for (auto &[wrapped, rule] : wrappedNames(stem + f.fused))
                    if (DiskKey *w = find(wrapped, state); w && w->tensor) {
                        k = w;
                        wrapper = rule;
                        break;
                    }
            if (!k || !k->tensor || k->tensor->shape.empty())
                return false;
            // Row offset: the sizes of the sections before this one, from the layout's
            // siblings (or what is left over for the last section).
            int64_t begin = 0;
            bool known = true;
            for (size_t j = 0; j < i; ++j) {
                auto it = m_byName.find(stem + f.parts[j]);
                if (it == m_byName.end() || it->second->shape.empty()) {
                    known = false;
                    break;
                }
                begin += it->second->shape[0];
            }
            if (!known && i + 1 == f.parts.size() && !p.shape.empty())
                begin = k->tensor->shape[0] - p.shape[0], known = true;
            if (!known || p.shape.empty())
                return false;
            const int64_t rows = state == "step" ? 0 : p.shape[0];
            e.rules = {"fused_on_disk"};
            if (wrapper)
                e.rules.push_back(wrapper);
            mark(k->used);
            // The whole parameter (rows [0, rows)) from the stored rows [begin, …).
            e.sources.push_back({std::string(k->key),
                                 k->tensor->shape.toVector(),
                                 k->tensor->dtypeName,
                                 0,
                                 0,
                                 rows,
                                 begin,
                                 {},
                                 entryOf(k)});
            std::vector<int64_t> rest(k->tensor->shape.begin() + 1, k->tensor->shape.end());
            std::vector<int64_t> want(p.shape.begin() + 1, p.shape.end());
            if (state != "step" && (begin + rows > k->tensor->shape[0] || rest != want)) {
                e.status = LoadStatus::ShapeMismatch;
                e.reason = "stored fused as " + std::string(k->key) + " " +
                           shapeText(k->tensor->shape) + ", which has no rows " +
                           std::to_string(begin) + ".." + std::to_string(begin + rows) +
                           " of shape " + shapeText(p.shape);
                e.fix = detail::shapeMismatchFix(std::string(k->key), k->tensor->shape, [&] {
                    std::vector<int64_t> w = p.shape;
                    if (!w.empty())
                        w[0] = k->tensor->shape[0];
                    return w;
                }());
                return true;
            }
            e.status = LoadStatus::Merge;
            e.reason = "stored fused with its sibling sections in " + std::string(k->key) +
                       " rows " + std::to_string(begin) + ".." + std::to_string(begin + rows) +
                       "; the load asks for " + e.requestKeys.front();
            e.fix = "Build the model fused like the saving run (e.g. --mla-down-proj-fusion "
                    "for linear_qkv_down_proj), or re-save the checkpoint with the split "
                    "handlers; ShardScope can cut the section out.";
            return true;
        }
    }
    return false;
}

void Differ::findOptimizerIndices()
{
    std::call_once(m_optimizerIndexOnce, [&] {
        // Only DCP asks for optimizer state by name (get_optimizer_state_dict); a torch.save'd
        // optimizer.state_dict() is loaded by Optimizer.load_state_dict, by position, as saved.
        if (m_index.format != Format::Dcp)
            return;
        // optimizer.state.<position>.<state>: a raw Optimizer.state_dict() handed to dcp.save.
        std::map<int64_t, std::vector<int64_t>> shapes; // position → a tensor state's shape
        for (const DiskKey &k : m_disk.keys) {
            if (!k.key.starts_with("optimizer.state."))
                continue;
            const std::string_view rest = k.key.substr(16);
            const size_t dot = rest.find('.');
            if (dot == 0 || dot == std::string_view::npos ||
                !std::all_of(rest.begin(), rest.begin() + std::ptrdiff_t(dot),
                             [](char c) { return c >= '0' && c <= '9'; }) ||
                dot > 9)
                return; // a name, not a position: not a raw state dict
            auto &shape = shapes[std::stoll(std::string(rest.substr(0, dot)))];
            if (k.tensor && rest.substr(dot + 1) != "step")
                shape = k.tensor->shape.toVector();
        }
        if (shapes.empty())
            return;
        // Optimizer.state_dict() numbers the parameters in param_groups order; an optimizer
        // built over model.parameters() (one group) numbers them in the model's order, which
        // is the layout's. Taken only when every position's state has its parameter's shape.
        std::vector<const LayoutParam *> order;
        for (const Expanded &x : m_params)
            if (x.param.hasOptimizerState && !x.param.name.ends_with("._extra_state"))
                order.push_back(&x.param);
        const int64_t last = shapes.rbegin()->first;
        m_optimizerIndexWhy = "the checkpoint keeps optimizer state by position "
                              "(optimizer.state." +
                              std::to_string(shapes.begin()->first) +
                              ".exp_avg …: a raw optimizer.state_dict() given to dcp.save), "
                              "while the load asks by parameter name (get_optimizer_state_dict)";
        if (last + 1 != int64_t(order.size())) {
            m_optimizerIndexWhy += "; it numbers " + std::to_string(last + 1) +
                                   " parameters and the model has " + std::to_string(order.size()) +
                                   " with optimizer state, so the positions cannot be named "
                                   "from the model's order";
            return;
        }
        for (const auto &[pos, shape] : shapes)
            if (!shape.empty() && shape != order[size_t(pos)]->shape) {
                m_optimizerIndexWhy += "; position " + std::to_string(pos) + " holds " +
                                       shapeText(shape) + " where the model's parameter " +
                                       std::to_string(pos) + " (" + order[size_t(pos)]->name +
                                       ") is " + shapeText(order[size_t(pos)]->shape) +
                                       ": the optimizer's param_groups do not follow the "
                                       "model's order";
                return;
            }
        for (size_t i = 0; i < order.size(); ++i)
            m_optimizerIndex.emplace(order[i]->name, std::to_string(i));
    });
}

bool Differ::optimizerIndex(DiffEntry &e, const LayoutParam &p, const Request &q,
                            const std::string &state)
{
    if (state.empty())
        return false;
    findOptimizerIndices();
    const auto it = m_optimizerIndex.find(p.name);
    if (it == m_optimizerIndex.end() || q.pieces.size() != 1)
        return false;
    return underOtherNames(
        e, q, state, "optimizer_index", [&](const std::string &) { return it->second; },
        "kept by position: a raw optimizer.state_dict() given to dcp.save; position " + it->second +
            " is " + p.name +
            " in param_groups order, the model's parameter order; get_optimizer_state_dict asks "
            "by name",
        "Save the optimizer by name: dcp.save({'optimizer': get_optimizer_state_dict(model, "
        "optimizer)}) (torch.distributed.checkpoint.state_dict), or load this checkpoint "
        "through a state dict of the same raw form (optimizer.state_dict()) and "
        "Optimizer.load_state_dict; shardscope-cli fix writes a copy under the parameters' "
        "names, param_groups' params included (KempnerInstitute/KempnerForge#115).");
}

bool Differ::peftBaseLayer(DiffEntry &e, const LayoutParam &p, const Request &q,
                           const std::string &state)
{
    if (p.name.find(".base_layer.") == std::string::npos &&
        !p.name.starts_with("base_model.model."))
        return false;
    return underOtherNames(
        e, q, state, "peft_base_layer", detail::peftPlainName,
        "the model is wrapped by PEFT (get_peft_model: base_model.model. before every name, "
        "each LoRA module's own weight under base_layer.), the checkpoint is the base model's",
        "Load the checkpoint before wrapping (from_pretrained, then get_peft_model), or into "
        "the wrapped model with peft's set_base_model_state_dict (huggingface/peft#3000, "
        "pytorch/torchtitan#2945); shardscope-cli fix writes a copy under the wrapped names.");
}

} // namespace shardscope::detail
