// SPDX-License-Identifier: MIT
#include "keytree.h"

#include <shardscope/escape.h>
#include <shardscope/keyfold.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace shardscope::cli {

namespace {

// A name's one numeric field, as every fold of ShardScope defines it (shardscope/keyfold.h): a
// number ("3") or a weight/bias index ("weight12_w"). "linear_fc1" has none: fc1 and fc2 differ.
bool splitNumber(const std::string &s, std::string &pre, int64_t &num, std::string &post)
{
    const SplitName split = splitName(s);
    if (split.values.size() != 1)
        return false;
    pre = split.pieces[0];
    num = split.values[0];
    post = split.pieces[1];
    return true;
}

std::string signature(const KeyNode &n)
{
    std::string s = n.detail + "{";
    for (const auto &c : n.children)
        s += c->name + "*" + std::to_string(c->multiplicity) + ":" + signature(*c) + ";";
    return s + "}";
}

void collapseNode(KeyNode &n)
{
    for (auto &c : n.children)
        collapseNode(*c);
    // Group siblings by (template, subtree signature), keeping first-seen order.
    struct Group
    {
        std::string pre, post;
        std::vector<int64_t> nums;
        std::vector<size_t> members;
    };
    std::map<std::string, size_t> byKey;
    std::vector<Group> groups;
    std::vector<std::unique_ptr<KeyNode>> out;
    std::vector<int> groupOf(n.children.size(), -1);
    for (size_t i = 0; i < n.children.size(); ++i) {
        std::string pre, post;
        int64_t num = 0;
        if (!splitNumber(n.children[i]->name, pre, num, post))
            continue;
        const std::string key = pre + "#" + post + "|" + signature(*n.children[i]);
        auto [it, inserted] = byKey.emplace(key, groups.size());
        if (inserted)
            groups.push_back({pre, post, {}, {}});
        groups[it->second].nums.push_back(num);
        groups[it->second].members.push_back(i);
        groupOf[i] = int(it->second);
    }
    std::vector<bool> emitted(groups.size(), false);
    for (size_t i = 0; i < n.children.size(); ++i) {
        const int g = groupOf[i];
        if (g < 0 || groups[size_t(g)].members.size() < 2) {
            out.push_back(std::move(n.children[i]));
            continue;
        }
        if (emitted[size_t(g)])
            continue;
        emitted[size_t(g)] = true;
        Group &gr = groups[size_t(g)];
        std::sort(gr.nums.begin(), gr.nums.end());
        auto rep = std::move(n.children[i]);
        rep->name = gr.pre + foldValues(gr.nums) + gr.post;
        rep->multiplicity *= gr.members.size();
        out.push_back(std::move(rep));
    }
    n.children = std::move(out);
    // Join single-child chains of groups: model → module → decoder becomes model.module.decoder.
    for (auto &c : n.children) {
        while (c->detail.empty() && c->children.size() == 1) {
            auto only = std::move(c->children.front());
            only->name = c->name + "." + only->name;
            only->multiplicity *= c->multiplicity;
            c = std::move(only);
        }
    }
}

void renderNode(const KeyNode &n, int depth, std::string &out)
{
    for (const auto &c : n.children) {
        out.append(size_t(depth) * 2, ' ');
        out += visibleName(c->name); // a key from the file: one line, nothing a terminal acts on
        if (!c->detail.empty()) {
            out += "  " + c->detail;
            if (!c->summary.empty())
                out += "  " + c->summary;
        }
        if (c->multiplicity > 1)
            out += "  (×" + std::to_string(c->multiplicity) + ")";
        out += "\n";
        renderNode(*c, depth + 1, out);
    }
}

} // namespace

void KeyTree::add(std::string_view key, std::string detail, std::string summary)
{
    KeyNode *n = &m_root;
    size_t start = 0;
    while (true) {
        const size_t dot = key.find('.', start);
        const std::string part(key.substr(start, dot == std::string::npos ? dot : dot - start));
        KeyNode *next = nullptr;
        // Linear search is fine: siblings are few except for layer and expert runs, and those are
        // added in order, so the match is nearly always the last child.
        for (auto it = n->children.rbegin(); it != n->children.rend(); ++it)
            if ((*it)->name == part && ((*it)->detail.empty() == (dot != std::string::npos))) {
                next = it->get();
                break;
            }
        if (!next) {
            n->children.push_back(std::make_unique<KeyNode>());
            next = n->children.back().get();
            next->name = part;
        }
        n = next;
        if (dot == std::string::npos)
            break;
        start = dot + 1;
    }
    n->detail = std::move(detail);
    n->summary = std::move(summary);
}

void KeyTree::collapse()
{
    collapseNode(m_root);
}

std::string KeyTree::render() const
{
    std::string out;
    renderNode(m_root, 0, out);
    return out;
}

} // namespace shardscope::cli
