// SPDX-License-Identifier: MIT
// Checkpoint against checkpoint: keys added, removed, renamed by a rule, shape or dtype changed.
#include "common/backgroundworker.h"
#include "common/shapes.h"
#include "shardscope/diff.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <regex>

namespace shardscope {

using detail::shapeText;

namespace {

struct Item
{
    std::string key;
    const TensorEntry *tensor = nullptr;
};

// Canonical spelling under the rename rules that are switched on: no wrapper prefixes, MTP inner
// layer as transformer_layer, sequential experts as grouped.
std::string canonical(const std::string &key, const std::vector<std::string> &disabled,
                      std::string *rule)
{
    auto on = [&](const char *r) {
        return std::find(disabled.begin(), disabled.end(), r) == disabled.end();
    };
    std::string k = key;
    if (on("wrapper_prefix")) {
        // ^model\d*\.(module\.)* dropped, ^optimizer\.state\.(module\.)+ made
        // optimizer.state.: by hand, as std::regex costs microseconds a key, seconds over a
        // DeepSeek-V3 checkpoint's 1.3 M keys.
        std::string_view v = k;
        if (v.starts_with("model")) {
            size_t at = 5;
            while (at < v.size() && v[at] >= '0' && v[at] <= '9')
                ++at;
            if (at < v.size() && v[at] == '.') {
                v.remove_prefix(at + 1);
                while (v.starts_with("module."))
                    v.remove_prefix(7);
            }
        }
        std::string n;
        if (v.starts_with("optimizer.state.module.")) {
            v.remove_prefix(16);
            while (v.starts_with("module."))
                v.remove_prefix(7);
            n = "optimizer.state." + std::string(v);
        } else {
            n = std::string(v);
        }
        if (n != k && rule)
            *rule = "wrapper_prefix";
        k = n;
    }
    if (on("mtp_spelling") || on("mtp")) {
        const std::string from = ".mtp_model_layer.";
        if (size_t p = k.find(from); p != std::string::npos) {
            k.replace(p, from.size(), ".transformer_layer.");
            if (rule)
                *rule = "mtp";
        }
    }
    if (on("experts_form")) {
        static const std::regex seq(
            R"(\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.(weight|bias))");
        std::smatch m;
        if (k.find(".mlp.experts.local_experts.") != std::string::npos &&
            std::regex_search(k, m, seq)) {
            k = m.prefix().str() + ".mlp.experts.linear_fc" + m[2].str() + "." + m[3].str() +
                m[1].str() + m.suffix().str();
            if (rule)
                *rule = "experts_form";
        }
    }
    return k;
}

// The fused key a split part belongs to, and the rule that splits it.
std::optional<std::pair<std::string, std::string>> fusedOf(const std::string &key)
{
    auto cut = [&](std::string_view tail) { return key.substr(0, key.size() - tail.size()); };
    for (std::string_view t : {"_w", "_v"})
        if (key.ends_with(t))
            return std::pair{cut(t), std::string("swiglu")};
    for (std::string_view t : {".query", ".key", ".value", ".z", ".beta", ".alpha"})
        if (key.ends_with(t) && (key.find(".in_proj.") != std::string::npos ||
                                 key.find(".conv1d.") != std::string::npos))
            return std::pair{cut(t), std::string("gdn")};
    for (std::string_view t : {".linear_q_down_proj.weight", ".linear_kv_down_proj.weight"})
        if (key.ends_with(t))
            return std::pair{cut(t) + ".linear_qkv_down_proj.weight", std::string("mla_down_proj")};
    if (key.ends_with(".input_layernorm.weight"))
        return std::pair{cut(".input_layernorm.weight") +
                             ".self_attention.linear_qkv_down_proj.layer_norm_weight",
                         std::string("mla_down_proj")};
    return std::nullopt;
}

} // namespace

CheckpointDiff diffCheckpoints(const CheckpointIndex &a, const CheckpointIndex &b,
                               const DiffOptions &options,
                               const std::function<bool(uint64_t done, uint64_t total)> &progress)
{
    CheckpointDiff d;
    d.first = a.inputPath;
    d.second = b.inputPath;
    d.firstTorch = torchReadability(a);
    d.secondTorch = torchReadability(b);
    // Each key of both sides once, then the splits' pass over the changes (counted as one key
    // each side): a cancel is seen within a thousand keys, a millisecond or two.
    const uint64_t total = 2 * (a.itemCount() + b.itemCount());
    uint64_t done = 0;
    bool stopped = false;
    auto tick = [&] {
        if (!stopped && ++done % 1024 == 0 && progress)
            stopped = !progress(std::min(done, total - 1), total);
        return !stopped;
    };
    // The key maps (millions of nodes at DeepSeek-V3 scale) are freed on a worker: freeing them
    // here took half a second, after the result or a cancel.
    struct Maps
    {
        std::map<std::string, Item> inB;
        std::map<std::string, std::string> ruleOfB;
        std::map<std::string, bool> matched;
    };
    struct Release
    {
        std::unique_ptr<Maps> maps = std::make_unique<Maps>();
        ~Release() { detail::releaseInBackground(std::move(maps)); }
    } scratch;
    auto &inB = scratch.maps->inB;
    auto &ruleOfB = scratch.maps->ruleOfB;
    auto &matched = scratch.maps->matched;
    for (const TensorEntry &t : b.tensors) {
        if (!tick())
            return d;
        std::string rule;
        inB[canonical(t.key.str(), options.disabledRules, &rule)] = {t.key.str(), &t};
        ruleOfB[t.key.str()] = rule;
    }
    for (const ObjectEntry &o : b.objects) {
        if (!tick())
            return d;
        inB[canonical(o.key.str(), options.disabledRules, nullptr)] = {o.key.str(), nullptr};
    }

    auto visit = [&](const std::string &key, const TensorEntry *t) {
        std::string ruleA;
        const std::string c = canonical(key, options.disabledRules, &ruleA);
        auto it = inB.find(c);
        if (it == inB.end()) {
            d.changes.push_back({KeyChange::Kind::Removed, key, {}, {}, {}});
            return;
        }
        matched[c] = true;
        const Item &other = it->second;
        if (other.key != key) {
            const std::string rule = !ruleA.empty() ? ruleA : ruleOfB[other.key];
            d.changes.push_back({KeyChange::Kind::Renamed, key, other.key, rule, {}});
        }
        if (t && other.tensor) {
            if (t->shape != other.tensor->shape)
                d.changes.push_back(
                    {KeyChange::Kind::ShapeChanged,
                     key,
                     other.key,
                     {},
                     shapeText(t->shape) + " -> " + shapeText(other.tensor->shape)});
            else if (t->dtypeName != other.tensor->dtypeName)
                d.changes.push_back({KeyChange::Kind::DtypeChanged,
                                     key,
                                     other.key,
                                     {},
                                     t->dtypeName + " -> " + other.tensor->dtypeName});
            else if (other.key == key)
                ++d.same;
        } else if (other.key == key) {
            ++d.same;
        }
    };
    for (const TensorEntry &t : a.tensors) {
        if (!tick())
            return d;
        visit(t.key.str(), &t);
    }
    for (const ObjectEntry &o : a.objects) {
        if (!tick())
            return d;
        visit(o.key.str(), nullptr);
    }
    for (const auto &[c, item] : inB)
        if (!matched.count(c))
            d.changes.push_back({KeyChange::Kind::Added, item.key, {}, {}, {}});
    done = total / 2;

    // Fused in one, split in the other (SwiGLU _w/_v, MLA down projections and the absorbed
    // norm, GDN sections): a key on one side whose parts are on the other is a rule's split.
    std::vector<KeyChange> &ch = d.changes;
    std::vector<bool> drop(ch.size(), false);
    for (const auto kind : {KeyChange::Kind::Added, KeyChange::Kind::Removed}) {
        const auto other =
            kind == KeyChange::Kind::Added ? KeyChange::Kind::Removed : KeyChange::Kind::Added;
        std::map<std::string, std::vector<size_t>> partsByFused;
        std::map<std::string, std::string> ruleOf;
        for (size_t i = 0; i < ch.size(); ++i) {
            if (!tick())
                return d;
            if (ch[i].kind != kind || drop[i])
                continue;
            if (auto f = fusedOf(ch[i].key)) {
                const std::string c = canonical(f->first, options.disabledRules, nullptr);
                partsByFused[c].push_back(i);
                ruleOf[c] = f->second;
            }
        }
        for (size_t i = 0; i < ch.size(); ++i) {
            if (!tick())
                return d;
            if (ch[i].kind != other || drop[i])
                continue;
            const std::string c = canonical(ch[i].key, options.disabledRules, nullptr);
            auto it = partsByFused.find(c);
            if (it == partsByFused.end())
                continue;
            std::string parts;
            for (size_t j : it->second) {
                parts += (parts.empty() ? "" : ", ") + ch[j].key;
                drop[j] = true;
            }
            const bool split = other == KeyChange::Kind::Removed; // fused in the first
            ch[i].detail = it->second.size() == 1 ? std::string("moved (absorbed norm)")
                                                  : (split ? "split into " : "merged from ") +
                                                        std::to_string(it->second.size()) + " keys";
            if (!split) { // report it from the first checkpoint's side
                ch[i].otherKey = ch[i].key;
                ch[i].key = parts;
            } else {
                ch[i].otherKey = parts;
            }
            ch[i].kind = KeyChange::Kind::Renamed;
            ch[i].rule = ruleOf[c];
        }
    }
    std::vector<KeyChange> kept;
    for (size_t i = 0; i < ch.size(); ++i)
        if (!drop[i])
            kept.push_back(std::move(ch[i]));
    d.changes = std::move(kept);
    if (progress && !stopped)
        progress(total, total);
    return d;
}

} // namespace shardscope
