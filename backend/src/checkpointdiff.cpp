// SPDX-License-Identifier: MIT
// Checkpoint against checkpoint: keys added, removed, renamed by a rule, shape or dtype changed.
#include "shardscope/diff.h"

#include <algorithm>
#include <map>
#include <regex>

namespace shardscope {

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
        static const std::regex model(R"(^model\d*\.(module\.)*)");
        static const std::regex optim(R"(^optimizer\.state\.(module\.)+)");
        std::string n = std::regex_replace(k, model, "");
        n = std::regex_replace(n, optim, "optimizer.state.");
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
        if (std::regex_search(k, m, seq)) {
            k = m.prefix().str() + ".mlp.experts.linear_fc" + m[2].str() + "." + m[3].str() +
                m[1].str() + m.suffix().str();
            if (rule)
                *rule = "experts_form";
        }
    }
    return k;
}

std::string shapeText(const std::vector<int64_t> &s)
{
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

} // namespace

CheckpointDiff diffCheckpoints(const CheckpointIndex &a, const CheckpointIndex &b,
                               const DiffOptions &options)
{
    CheckpointDiff d;
    d.first = a.inputPath;
    d.second = b.inputPath;
    std::map<std::string, Item> inB;
    std::map<std::string, std::string> ruleOfB;
    for (const TensorEntry &t : b.tensors) {
        std::string rule;
        inB[canonical(t.key, options.disabledRules, &rule)] = {t.key, &t};
        ruleOfB[t.key] = rule;
    }
    for (const ObjectEntry &o : b.objects)
        inB[canonical(o.key, options.disabledRules, nullptr)] = {o.key, nullptr};

    std::map<std::string, bool> matched;
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
    for (const TensorEntry &t : a.tensors)
        visit(t.key, &t);
    for (const ObjectEntry &o : a.objects)
        visit(o.key, nullptr);
    for (const auto &[c, item] : inB)
        if (!matched.count(c))
            d.changes.push_back({KeyChange::Kind::Added, item.key, {}, {}, {}});

    // Fused in one, split in the other (SwiGLU _w/_v, MLA down projections, GDN sections):
    // a removed key whose rows equal the sum of added keys that extend its name is a split.
    std::vector<KeyChange> &ch = d.changes;
    std::map<std::string, std::vector<size_t>> addedByStem;
    for (size_t i = 0; i < ch.size(); ++i)
        if (ch[i].kind == KeyChange::Kind::Added)
            for (const std::string &suffix :
                 {std::string("_w"), std::string("_v"), std::string(".query"), std::string(".key"),
                  std::string(".value"), std::string(".z"), std::string(".beta"),
                  std::string(".alpha")})
                if (ch[i].key.ends_with(suffix))
                    addedByStem[canonical(ch[i].key.substr(0, ch[i].key.size() - suffix.size()),
                                          options.disabledRules, nullptr)]
                        .push_back(i);
    std::vector<bool> drop(ch.size(), false);
    for (size_t i = 0; i < ch.size(); ++i) {
        if (ch[i].kind != KeyChange::Kind::Removed)
            continue;
        auto it = addedByStem.find(canonical(ch[i].key, options.disabledRules, nullptr));
        if (it == addedByStem.end())
            continue;
        std::string parts;
        for (size_t j : it->second) {
            parts += (parts.empty() ? "" : ", ") + ch[j].key;
            drop[j] = true;
        }
        const bool glu = ch[it->second.front()].key.ends_with("_w") ||
                         ch[it->second.front()].key.ends_with("_v");
        ch[i].kind = KeyChange::Kind::Renamed;
        ch[i].otherKey = parts;
        ch[i].rule = glu ? "swiglu" : "gdn";
        ch[i].detail = "split into " + std::to_string(it->second.size()) + " keys";
    }
    std::vector<KeyChange> kept;
    for (size_t i = 0; i < ch.size(); ++i)
        if (!drop[i])
            kept.push_back(std::move(ch[i]));
    d.changes = std::move(kept);
    return d;
}

} // namespace shardscope
