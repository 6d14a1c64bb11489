// SPDX-License-Identifier: MIT
// CheckpointTreeModel's insides, shared by its files: the node store (checkpointtreemodel.cpp
// serves it to views), its building (treebuilder.cpp), the compaction of single-child chains
// (treecompaction.cpp) and the load marks over it (treemarks.cpp).
#pragma once

#include "checkpointtreemodel.h"
#include "loadmarks.h"

#include <shardscope/checkpoint.h>

#include <QStringList>

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::model {

constexpr uint32_t NoNode = std::numeric_limits<uint32_t>::max();
constexpr uint32_t RootNode = 0;

struct Node
{
    uint32_t parent = NoNode;
    uint32_t row = 0;        ///< position among the parent's children
    uint32_t firstChild = 0; ///< into Tree::children
    uint32_t childCount = 0;
    uint32_t nameOffset = 0; ///< into Tree::names
    uint32_t nameLength = 0;
    int32_t entry = -1; ///< tensor or object index
    NodeKind kind = NodeKind::Group;
    uint32_t problemCount = 0;
    uint64_t numel = 0;
    uint64_t bytes = 0;
    uint64_t chunks = 0;
    uint64_t leaves = 0;  ///< entries at or below
    uint32_t flatRow = 0; ///< a leaf's row in the flat list
};

// Leaves by full key: open addressing over node ids (no allocation per key: a hash map of
// 650,000 string views costs more than the rest of the tree). Filled on the first find(): a
// tenth of a second at DeepSeek-V3 scale that the first paint need not wait for (a checkpoint
// with problems or a diff's marks ask for it; browsing does not).
class LeafTable
{
public:
    using KeyOf = std::function<std::string_view(uint32_t node)>;

    /** Over these leaves (kept, not copied: the tree's flat list) and the keys rebind() gave. */
    void build(const std::vector<uint32_t> &leaves)
    {
        std::lock_guard lock(m_mutex);
        m_leaves = &leaves;
        m_slots.clear();
        m_filled.store(false, std::memory_order_release);
    }
    /** The same table over other entries with the same keys. */
    void rebind(KeyOf keyOf)
    {
        std::lock_guard lock(m_mutex);
        m_keyOf = std::move(keyOf);
    }
    /** The node of `key`; 0 when none. Safe from any thread. */
    uint32_t find(std::string_view key) const
    {
        fill();
        if (m_slots.empty())
            return 0;
        for (size_t i = slotOf(key);; i = (i + 1) & (m_slots.size() - 1)) {
            if (m_slots[i] == Empty)
                return 0;
            if (m_keyOf(m_slots[i]) == key)
                return m_slots[i];
        }
    }

private:
    static constexpr uint32_t Empty = 0; // the root is never a leaf
    void fill() const
    {
        if (m_filled.load(std::memory_order_acquire))
            return;
        std::lock_guard lock(m_mutex);
        if (m_filled.load(std::memory_order_relaxed) || !m_leaves)
            return;
        size_t size = 16;
        while (size < m_leaves->size() * 2)
            size *= 2;
        m_slots.assign(size, Empty);
        for (uint32_t node : *m_leaves) {
            size_t i = slotOf(m_keyOf(node));
            while (m_slots[i] != Empty)
                i = (i + 1) & (m_slots.size() - 1);
            m_slots[i] = node;
        }
        m_filled.store(true, std::memory_order_release);
    }
    size_t slotOf(std::string_view key) const
    {
        return std::hash<std::string_view>()(key) & (m_slots.size() - 1);
    }
    mutable std::vector<uint32_t> m_slots;
    mutable std::mutex m_mutex;
    mutable std::atomic<bool> m_filled{false};
    const std::vector<uint32_t> *m_leaves = nullptr;
    KeyOf m_keyOf;
};

struct CheckpointTreeModel::Tree
{
    std::vector<Node> nodes;
    std::vector<uint32_t> children; ///< each node's children, contiguous
    std::string names;              ///< UTF-8 name pool
    LeafTable leafByKey;
    std::vector<std::pair<uint32_t, uint32_t>> problems; ///< (leaf node, problem), sorted
    std::vector<uint32_t> flat;                          ///< the leaves, in entry order
    std::vector<LoadMark> marks;                         ///< per node; empty: no marks
    std::vector<uint32_t> markCounts;                    ///< per group: leaves below with its mark
    std::vector<uint32_t> markOf;                        ///< per leaf: 1 + its index in markSet
    std::shared_ptr<const LoadMarkSet> markSet;
    bool topOnly = false; ///< prepareTop(): groups stand for rows not built yet

    std::string_view name(uint32_t n) const
    {
        return std::string_view(names).substr(nodes[n].nameOffset, nodes[n].nameLength);
    }
};

struct CheckpointTreeModel::Prepared
{
    std::shared_ptr<const CheckpointIndex> index;
    std::unique_ptr<Tree> tree;
    QStringList dtypes;
    bool provisional = false;
};

// The groups of a key (all its parts but the last) and its name (the last). A recorded nesting
// (DCP planner data, torch.save dicts) is split at its own boundaries first: its elements are
// often module FQNs themselves ("model" / "module.decoder.layers.0..."). `parts`: scratch.
void keySegments(std::string_view key, const KeyPath &path, std::vector<std::string_view> &parts,
                 std::vector<std::string_view> &out);

// A group whose only child is a group becomes one row ("state.module.module.module"), as
// file browsers compact folders: Megatron's wrapper chains would otherwise cost a level
// each. Parents come before their children, so one pass in id order folds whole chains;
// the group takes its child's slice of `children`, and the child stays in the vector,
// unlinked (parent NoNode).
void compactChains(std::vector<Node> &nodes, const std::vector<uint32_t> &children,
                   std::string &names);

} // namespace shardscope::model
