// SPDX-License-Identifier: MIT
#include "checkpointtreemodel.h"

#include "formatting.h"

#include <shardscope/checkpoint.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace shardscope::model {

namespace {

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

// Appends the dot-separated parts of `key` to `out`.
void splitKey(std::string_view key, std::vector<std::string_view> &out)
{
    size_t start = 0;
    while (true) {
        const size_t dot = key.find('.', start);
        if (dot == std::string_view::npos) {
            out.push_back(key.substr(start));
            return;
        }
        out.push_back(key.substr(start, dot - start));
        start = dot + 1;
    }
}

} // namespace

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

    std::string_view name(uint32_t n) const
    {
        return std::string_view(names).substr(nodes[n].nameOffset, nodes[n].nameLength);
    }
};

namespace {

// Builds the tree in one pass over the entries. Group lookups go through a hash set keyed on
// (parent, name in the pool): the candidate name is appended to the pool first and dropped
// again when a group of that name exists, so no per-segment string is allocated.
class TreeBuilder
{
public:
    /**
     * `threads` 2: the second half of the entries on a thread of its own, into a tree that is
     * then merged into the first (the same rows in the same order as one thread builds: see
     * merge()). Only worth it past a few hundred thousand entries.
     */
    void build(const CheckpointIndex &index, std::vector<Node> &nodes,
               std::vector<uint32_t> &children, std::string &names, int threads)
    {
        m_nodes = &nodes;
        m_names = &names;
        // Leaves, and about half as many groups again (DeepSeek-V3: 650,000 keys).
        const size_t entries = index.tensors.size() + index.objects.size();
        nodes.reserve(entries + entries / 2 + 1024);
        nodes.push_back(Node{}); // the invisible root
        if (threads == 1) {
            addEntries(index, 0, entries);
        } else {
            const size_t half = entries / 2;
            std::vector<Node> otherNodes;
            std::string otherNames;
            TreeBuilder other;
            other.m_nodes = &otherNodes;
            other.m_names = &otherNames;
            otherNodes.reserve((entries - half) * 3 / 2 + 1024);
            otherNodes.push_back(Node{});
            std::thread second([&] { other.addEntries(index, half, entries); });
            addEntries(index, 0, half);
            second.join();
            merge(otherNodes, otherNames);
        }

        // Child lists as one id vector, each node's children a contiguous slice in the order
        // they were made: a counting sort by parent (no list per node: a million small vectors
        // cost more than the rest of the tree).
        uint32_t at = 0;
        for (Node &n : nodes) {
            n.firstChild = at;
            at += n.childCount;
            n.childCount = 0;
        }
        children.assign(at, 0);
        for (uint32_t id = 1; id < nodes.size(); ++id) {
            Node &p = nodes[nodes[id].parent];
            nodes[id].row = p.childCount++;
            children[p.firstChild + nodes[id].row] = id;
        }
        compactChains(nodes, children, names);
    }

    /** Entries [begin, end) of the one list (tensors, then objects), in order. */
    void addEntries(const CheckpointIndex &index, size_t begin, size_t end)
    {
        std::vector<std::string_view> segments;
        const size_t tensors = index.tensors.size();
        for (size_t e = begin; e < std::min(end, tensors); ++e) {
            const TensorEntry &t = index.tensors[e];
            segmentsOf(t.key, t.path, segments);
            const uint32_t leaf = addLeaf(segments, NodeKind::Tensor, int32_t(e));
            Node &n = (*m_nodes)[leaf];
            n.numel = uint64_t(std::max<int64_t>(t.numel(), 0));
            n.bytes = t.nbytes();
            n.chunks = t.chunks.size();
        }
        for (size_t e = std::max(begin, tensors); e < end; ++e) {
            const ObjectEntry &o = index.objects[e - tensors];
            segmentsOf(o.key, o.path, segments);
            const uint32_t leaf = addLeaf(segments, NodeKind::Object, int32_t(e - tensors));
            if (o.location)
                (*m_nodes)[leaf].bytes = o.location->length;
        }
    }

    // The tree of the entries after this one's, added in its own node order: every entry there
    // comes after every entry here, so a group both hold gets the other's children after its
    // own, as one pass would have made them; a group or leaf of the other's is made after its
    // parent. Node ids differ from one pass's; rows, names and entry order do not.
    void merge(const std::vector<Node> &other, const std::string &otherNames)
    {
        std::vector<uint32_t> to(other.size(), RootNode);
        for (uint32_t b = 1; b < other.size(); ++b) {
            const Node &n = other[b];
            const uint32_t parent = to[n.parent];
            const std::string_view name =
                std::string_view(otherNames).substr(n.nameOffset, n.nameLength);
            if (n.kind == NodeKind::Group) {
                to[b] = groupChild(parent, name);
                continue;
            }
            to[b] = newNode(parent, name, n.kind, n.entry);
            Node &leaf = (*m_nodes)[to[b]];
            leaf.numel = n.numel;
            leaf.bytes = n.bytes;
            leaf.chunks = n.chunks;
        }
        m_lastPath.clear();
        m_lastSegments.clear();
    }

private:
    // A group whose only child is a group becomes one row ("state.module.module.module"), as
    // file browsers compact folders: Megatron's wrapper chains would otherwise cost a level
    // each. Parents come before their children, so one pass in id order folds whole chains;
    // the group takes its child's slice of `children`, and the child stays in the vector,
    // unlinked (parent NoNode).
    void compactChains(std::vector<Node> &nodes, const std::vector<uint32_t> &children,
                       std::string &names)
    {
        for (uint32_t g = 1; g < nodes.size(); ++g) {
            if (nodes[g].kind != NodeKind::Group || nodes[g].parent == NoNode)
                continue;
            while (nodes[g].childCount == 1 &&
                   nodes[children[nodes[g].firstChild]].kind == NodeKind::Group) {
                const uint32_t c = children[nodes[g].firstChild];
                const std::string joined =
                    std::string(nameOf(nodes[g])) + '.' + std::string(nameOf(nodes[c]));
                nodes[g].nameOffset = uint32_t(names.size());
                nodes[g].nameLength = uint32_t(joined.size());
                names += joined;
                nodes[g].firstChild = nodes[c].firstChild;
                nodes[g].childCount = nodes[c].childCount;
                for (uint32_t k = 0; k < nodes[g].childCount; ++k)
                    nodes[children[nodes[g].firstChild + k]].parent = g;
                nodes[c].parent = NoNode;
                nodes[c].childCount = 0;
            }
        }
    }

    std::string_view nameOf(const Node &n) const
    {
        return std::string_view(*m_names).substr(n.nameOffset, n.nameLength);
    }

    // Groups by dotted prefix. A recorded nesting (DCP planner data, torch.save dicts) is
    // split at its own boundaries first: its elements are often module FQNs themselves
    // ("model" / "module.decoder.layers.0...").
    void segmentsOf(const std::string &key, const KeyPath &path, std::vector<std::string_view> &out)
    {
        out.clear();
        // Components that join to the key, each split at its dots: the key split at every dot.
        if (path.explicitParts().empty()) {
            splitKey(key, out);
            return;
        }
        path.partsInto(key, m_parts);
        for (std::string_view p : m_parts)
            splitKey(p, out);
    }
    std::vector<std::string_view> m_parts;

    uint32_t newNode(uint32_t parent, std::string_view name, NodeKind kind, int32_t entry)
    {
        Node n;
        n.parent = parent;
        n.nameOffset = uint32_t(m_names->size());
        n.nameLength = uint32_t(name.size());
        n.kind = kind;
        n.entry = entry;
        m_names->append(name);
        m_nodes->push_back(n);
        ++(*m_nodes)[parent].childCount; // placed once every node is made
        return uint32_t(m_nodes->size() - 1);
    }

    // The group `name` under `parent`, made when there is none. Groups are found through open
    // addressing over node ids (the root, 0, is never one): no allocation per lookup.
    uint32_t groupChild(uint32_t parent, std::string_view name)
    {
        if ((m_groupCount + 1) * 2 > m_groupSlots.size())
            growGroups();
        const size_t mask = m_groupSlots.size() - 1;
        for (size_t i = groupHash(parent, name) & mask;; i = (i + 1) & mask) {
            const uint32_t g = m_groupSlots[i];
            if (g == RootNode) {
                m_groupSlots[i] = newNode(parent, name, NodeKind::Group, -1);
                ++m_groupCount;
                return m_groupSlots[i];
            }
            const Node &n = (*m_nodes)[g];
            if (n.parent == parent && nameOf(n) == name)
                return g;
        }
    }
    static size_t groupHash(uint32_t parent, std::string_view name)
    {
        return std::hash<std::string_view>()(name) ^ (size_t(parent) * 0x9e3779b97f4a7c15ull);
    }
    void growGroups()
    {
        const std::vector<uint32_t> old = std::exchange(m_groupSlots, {});
        m_groupSlots.assign(std::max<size_t>(4096, old.size() * 2), RootNode);
        const size_t mask = m_groupSlots.size() - 1;
        for (const uint32_t g : old) {
            if (g == RootNode)
                continue;
            const Node &n = (*m_nodes)[g];
            size_t i = groupHash(n.parent, nameOf(n)) & mask;
            while (m_groupSlots[i] != RootNode)
                i = (i + 1) & mask;
            m_groupSlots[i] = g;
        }
    }

    uint32_t addLeaf(const std::vector<std::string_view> &segments, NodeKind kind, int32_t entry)
    {
        // Keys come grouped (a checkpoint's metadata lists a module's entries together): the
        // groups the previous key went through are reused for the prefix this key shares with
        // it, and only the rest is looked up.
        const size_t groups = segments.empty() ? 0 : segments.size() - 1;
        size_t shared = 0;
        while (shared < groups && shared < m_lastPath.size() &&
               m_lastSegments[shared] == segments[shared])
            ++shared;
        m_lastPath.resize(shared);
        m_lastSegments.resize(shared);
        uint32_t parent = shared ? m_lastPath.back() : RootNode;
        for (size_t s = shared; s < groups; ++s) {
            parent = groupChild(parent, segments[s]);
            m_lastPath.push_back(parent);
            m_lastSegments.push_back(segments[s]);
        }
        return newNode(parent, segments.empty() ? std::string_view() : segments.back(), kind,
                       entry);
    }
    std::vector<uint32_t> m_lastPath;             ///< the previous key's groups
    std::vector<std::string_view> m_lastSegments; ///< …and their names (views into the index)

    std::vector<Node> *m_nodes = nullptr;
    std::string *m_names = nullptr;
    std::vector<uint32_t> m_groupSlots; ///< group node ids by (parent, name); RootNode: empty
    size_t m_groupCount = 0;
};

} // namespace

namespace {
std::atomic<int> s_buildThreads{0};
} // namespace

void CheckpointTreeModel::setBuildThreads(int threads)
{
    s_buildThreads = threads;
}

CheckpointTreeModel::CheckpointTreeModel(QObject *parent)
    : QAbstractItemModel(parent)
    , m_tree(std::make_unique<Tree>())
{
    m_tree->nodes.push_back(Node{});
}

CheckpointTreeModel::~CheckpointTreeModel() = default;

struct CheckpointTreeModel::Prepared
{
    std::shared_ptr<const CheckpointIndex> index;
    std::unique_ptr<Tree> tree;
    QStringList dtypes;
    bool provisional = false;
};

std::shared_ptr<CheckpointTreeModel::Prepared>
CheckpointTreeModel::prepare(std::shared_ptr<const CheckpointIndex> index)
{
    if (!index) {
        auto prepared = std::make_shared<Prepared>();
        prepared->tree = std::make_unique<Tree>();
        prepared->tree->nodes.push_back(Node{});
        return prepared;
    }
    const CheckpointIndex &source = *index;
    return prepareFrom(source, std::move(index));
}

std::shared_ptr<CheckpointTreeModel::Prepared>
CheckpointTreeModel::prepareKeys(const CheckpointIndex &keys)
{
    // The fields the rows show, copied: the reader goes on filling in the rest of `keys`.
    auto copy = std::make_shared<CheckpointIndex>();
    copy->format = keys.format;
    copy->inputPath = keys.inputPath;
    copy->dataDir = keys.dataDir;
    copy->tensors.reserve(keys.tensors.size());
    for (const TensorEntry &t : keys.tensors) {
        TensorEntry &c = copy->tensors.emplace_back();
        c.key = t.key;
        c.path = t.path;
        c.dtype = t.dtype;
        c.dtypeName = t.dtypeName;
        c.shape = t.shape;
    }
    copy->objects.reserve(keys.objects.size());
    for (const ObjectEntry &o : keys.objects) {
        ObjectEntry &c = copy->objects.emplace_back();
        c.key = o.key;
        c.path = o.path;
        c.value = o.value;
    }
    auto prepared = prepareFrom(keys, std::move(copy)); // chunk counts from `keys`
    prepared->provisional = true;
    return prepared;
}

std::shared_ptr<const CheckpointIndex> CheckpointTreeModel::indexOf(const Prepared &prepared)
{
    return prepared.index;
}

bool CheckpointTreeModel::sameEntries(const CheckpointIndex &keys, const CheckpointIndex &full)
{
    if (keys.tensors.size() != full.tensors.size() || keys.objects.size() != full.objects.size())
        return false;
    for (size_t i = 0; i < keys.tensors.size(); ++i) {
        const TensorEntry &a = keys.tensors[i], &b = full.tensors[i];
        if (a.key != b.key || !(a.path == b.path) || a.shape != b.shape ||
            a.dtypeName != b.dtypeName)
            return false;
    }
    for (size_t i = 0; i < keys.objects.size(); ++i)
        if (keys.objects[i].key != full.objects[i].key ||
            !(keys.objects[i].path == full.objects[i].path))
            return false;
    return true;
}

std::shared_ptr<CheckpointTreeModel::Prepared>
CheckpointTreeModel::prepareFrom(const CheckpointIndex &source,
                                 std::shared_ptr<const CheckpointIndex> owner)
{
    auto prepared = std::make_shared<Prepared>();
    auto tree = std::make_unique<Tree>();
    TreeBuilder builder;
    const size_t entries = source.tensors.size() + source.objects.size();
    builder.build(source, tree->nodes, tree->children, tree->names,
                  s_buildThreads.load() > 0 ? s_buildThreads.load()
                  : entries >= 100'000      ? 2
                                            : 1);

    std::set<std::string_view> dtypeSet; // views into the snapshot or static names
    for (const TensorEntry &t : owner->tensors)
        dtypeSet.insert(t.dtypeName.empty() ? dtypeName(t.dtype) : std::string_view(t.dtypeName));
    for (std::string_view d : dtypeSet)
        prepared->dtypes.push_back(QString::fromUtf8(d.data(), qsizetype(d.size())));

    for (uint32_t n = 1; n < tree->nodes.size(); ++n)
        if (tree->nodes[n].kind != NodeKind::Group) {
            tree->nodes[n].flatRow = uint32_t(tree->flat.size());
            tree->flat.push_back(n);
        }
    bindKeys(*tree, owner.get());
    tree->leafByKey.build(tree->flat);
    summarise(*tree, *owner);

    prepared->index = std::move(owner);
    prepared->tree = std::move(tree);
    return prepared;
}

void CheckpointTreeModel::bindKeys(Tree &tree, const CheckpointIndex *entries)
{
    const std::vector<Node> *all = &tree.nodes;
    tree.leafByKey.rebind([entries, all](uint32_t n) -> std::string_view {
        const Node &node = (*all)[n];
        return node.kind == NodeKind::Tensor ? entries->tensors[size_t(node.entry)].key
                                             : entries->objects[size_t(node.entry)].key;
    });
}

// Leaf counts, stored sizes of objects, problems, and every group's sums from its leaves up.
void CheckpointTreeModel::summarise(Tree &tree, const CheckpointIndex &index)
{
    std::vector<Node> &nodes = tree.nodes;
    for (Node &n : nodes) {
        n.problemCount = 0;
        if (n.kind == NodeKind::Group) {
            n.leaves = n.numel = n.bytes = n.chunks = 0;
            continue;
        }
        n.leaves = 1;
        if (n.kind == NodeKind::Object) {
            const ObjectEntry &o = index.objects[size_t(n.entry)];
            n.bytes = o.location ? o.location->length : 0;
        }
    }
    tree.problems.clear();
    for (uint32_t p = 0; p < index.problems.size(); ++p) {
        const uint32_t leaf = tree.leafByKey.find(index.problems[p].key);
        if (leaf == 0)
            continue;
        tree.problems.emplace_back(leaf, p);
        ++nodes[leaf].problemCount;
    }
    std::sort(tree.problems.begin(), tree.problems.end());
    // Parents are created before their children, so one backward pass sums every subtree.
    for (size_t n = nodes.size() - 1; n > 0; --n) {
        if (nodes[n].parent == NoNode)
            continue; // folded into its parent's row
        Node &p = nodes[nodes[n].parent];
        p.leaves += nodes[n].leaves;
        p.numel += nodes[n].numel;
        p.bytes += nodes[n].bytes;
        p.chunks += nodes[n].chunks;
        p.problemCount += nodes[n].problemCount;
    }
}

void CheckpointTreeModel::setIndex(std::shared_ptr<const CheckpointIndex> index)
{
    adopt(prepare(std::move(index)));
}

void CheckpointTreeModel::adopt(std::shared_ptr<Prepared> prepared)
{
    if (!prepared || !prepared->tree) { // taken already, or none: empty
        setIndex(nullptr);
        return;
    }
    beginResetModel();
    m_index = std::move(prepared->index);
    m_tree = std::move(prepared->tree);
    m_dtypeNames = std::move(prepared->dtypes);
    m_provisional = prepared->provisional;
    endResetModel();
}

bool CheckpointTreeModel::completeIndex(std::shared_ptr<const CheckpointIndex> full)
{
    if (!m_provisional || !full || !m_index || full->tensors.size() != m_index->tensors.size() ||
        full->objects.size() != m_index->objects.size())
        return false;
    m_index = std::move(full);
    m_provisional = false;
    bindKeys(*m_tree, m_index.get());
    summarise(*m_tree, *m_index);
    if (rowCount() > 0) // the view repaints what it shows; "problems only" filters again
        Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1),
                           {Qt::DisplayRole, Qt::ToolTipRole, SortRole, BytesRole, HasProblemRole,
                            ProblemCountRole});
    return true;
}

void CheckpointTreeModel::forEachLeaf(const std::function<void(const LeafInfo &)> &fn) const
{
    if (!m_index)
        return;
    const Tree &t = *m_tree;
    for (uint32_t id = 1; id < t.nodes.size(); ++id) {
        const Node &n = t.nodes[id];
        if (n.kind == NodeKind::Group || (n.parent == NoNode && id != RootNode))
            continue;
        LeafInfo leaf;
        leaf.node = id;
        if (n.kind == NodeKind::Tensor) {
            const TensorEntry &e = m_index->tensors[size_t(n.entry)];
            leaf.key = e.key;
            leaf.dtype = e.dtypeName.empty() ? dtypeName(e.dtype) : std::string_view(e.dtypeName);
        } else {
            leaf.key = m_index->objects[size_t(n.entry)].key;
        }
        leaf.problem = n.problemCount > 0;
        leaf.mark = t.marks.empty() ? LoadMark::None : t.marks[id];
        leaf.chunks = n.chunks;
        leaf.bytes = n.bytes;
        fn(leaf);
    }
}

uint32_t CheckpointTreeModel::parentNode(uint32_t node) const
{
    const uint32_t p = node < m_tree->nodes.size() ? m_tree->nodes[node].parent : NoNode;
    return p == NoNode ? NoParent : p;
}

size_t CheckpointTreeModel::nodeCount() const
{
    return m_tree->nodes.size();
}

QModelIndex CheckpointTreeModel::index(int row, int column, const QModelIndex &parent) const
{
    if (row < 0 || column < 0 || column >= ColumnCount || parent.column() > 0)
        return {};
    if (m_flat) {
        if (parent.isValid() || size_t(row) >= m_tree->flat.size())
            return {};
        return createIndex(row, column, quintptr(m_tree->flat[size_t(row)]));
    }
    const uint32_t p = parent.isValid() ? uint32_t(parent.internalId()) : RootNode;
    if (p >= m_tree->nodes.size())
        return {};
    const Node &pn = m_tree->nodes[p];
    if (uint32_t(row) >= pn.childCount)
        return {};
    return createIndex(row, column, quintptr(m_tree->children[pn.firstChild + uint32_t(row)]));
}

QModelIndex CheckpointTreeModel::parent(const QModelIndex &child) const
{
    if (!child.isValid() || m_flat)
        return {};
    const uint32_t n = uint32_t(child.internalId());
    const uint32_t p = m_tree->nodes[n].parent;
    if (p == RootNode || p == NoNode)
        return {};
    return createIndex(int(m_tree->nodes[p].row), 0, quintptr(p));
}

int CheckpointTreeModel::rowCount(const QModelIndex &parent) const
{
    if (parent.column() > 0)
        return 0;
    if (m_flat)
        return parent.isValid() ? 0 : int(m_tree->flat.size());
    const uint32_t p = parent.isValid() ? uint32_t(parent.internalId()) : RootNode;
    return int(m_tree->nodes[p].childCount);
}

int CheckpointTreeModel::columnCount(const QModelIndex &) const
{
    return ColumnCount;
}

bool CheckpointTreeModel::hasChildren(const QModelIndex &parent) const
{
    return rowCount(parent) > 0;
}

Qt::ItemFlags CheckpointTreeModel::flags(const QModelIndex &index) const
{
    if (!index.isValid())
        return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (m_tree->nodes[index.internalId()].kind != NodeKind::Group)
        f |= Qt::ItemNeverHasChildren;
    return f;
}

QString CheckpointTreeModel::nodeName(uint32_t node) const
{
    if (m_flat)
        return nodeKey(node);
    const std::string_view n = m_tree->name(node);
    return QString::fromUtf8(n.data(), qsizetype(n.size()));
}

QString CheckpointTreeModel::nodeKey(uint32_t node) const
{
    const Node &n = m_tree->nodes[node];
    if (n.kind == NodeKind::Tensor)
        return QString::fromStdString(m_index->tensors[size_t(n.entry)].key);
    if (n.kind == NodeKind::Object)
        return QString::fromStdString(m_index->objects[size_t(n.entry)].key);
    std::vector<uint32_t> chain;
    for (uint32_t p = node; p != RootNode && p != NoNode; p = m_tree->nodes[p].parent)
        chain.push_back(p);
    std::string key;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        if (!key.empty())
            key += '.';
        key += m_tree->name(*it);
    }
    return QString::fromStdString(key);
}

QString CheckpointTreeModel::statusText(uint32_t node) const
{
    const Node &n = m_tree->nodes[node];
    if (n.problemCount == 0)
        return {};
    if (n.kind == NodeKind::Group)
        return n.problemCount == 1 ? tr("1 problem") : tr("%1 problems").arg(n.problemCount);
    const auto range = std::equal_range(
        m_tree->problems.begin(), m_tree->problems.end(), std::make_pair(node, uint32_t(0)),
        [](const auto &a, const auto &b) { return a.first < b.first; });
    QString text = displayText(m_index->problems[range.first->second].message);
    if (n.problemCount > 1)
        text += tr(" (+%1 more)").arg(n.problemCount - 1);
    return text;
}

QString CheckpointTreeModel::statusToolTip(uint32_t node) const
{
    QStringList lines;
    QModelIndex idx = createIndex(int(m_tree->nodes[node].row), 0, quintptr(node));
    for (const Problem *p : problemsAt(idx)) {
        if (lines.size() == 20) {
            lines.push_back(QStringLiteral("…"));
            break;
        }
        lines.push_back(QString::fromStdString(p->toString()));
    }
    return lines.join(QLatin1Char('\n'));
}

std::vector<const Problem *> CheckpointTreeModel::problemsAt(const QModelIndex &index) const
{
    std::vector<const Problem *> out;
    if (!index.isValid() || index.model() != this)
        return out;
    const uint32_t node = uint32_t(index.internalId());
    const auto range = std::equal_range(
        m_tree->problems.begin(), m_tree->problems.end(), std::make_pair(node, uint32_t(0)),
        [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto it = range.first; it != range.second; ++it)
        out.push_back(&m_index->problems[it->second]);
    return out;
}

QVariant CheckpointTreeModel::displayData(uint32_t node, int column) const
{
    const Node &n = m_tree->nodes[node];
    switch (column) {
    case NameColumn:
        if (m_flat)
            return displayText(nodeKey(node).toStdString());
        return displayText(m_tree->name(node));
    case DTypeColumn:
        if (n.kind == NodeKind::Tensor)
            return tensorDTypeName(m_index->tensors[size_t(n.entry)]);
        if (n.kind == NodeKind::Object)
            return tr("object");
        return {};
    case ShapeColumn:
        if (n.kind == NodeKind::Group)
            return n.leaves == 1 ? tr("1 entry") : tr("%1 entries").arg(formatCount(n.leaves));
        if (n.kind == NodeKind::Tensor)
            return formatShape(m_index->tensors[size_t(n.entry)].shape);
        if (n.kind == NodeKind::Object) {
            const ObjectEntry &o = m_index->objects[size_t(n.entry)];
            if (o.value)
                return displayText(o.value->summary(60));
            return o.location ? tr("stored bytes") : QString();
        }
        return {};
    case ChunksColumn:
        if (n.kind == NodeKind::Object || (n.kind == NodeKind::Group && n.chunks == 0))
            return {};
        return formatCount(n.chunks);
    case SizeColumn:
        if (n.kind == NodeKind::Object && n.bytes == 0)
            return {};
        return formatBytes(n.bytes);
    case LoadColumn:
        return loadText(node);
    case StatusColumn:
        return statusText(node);
    default:
        return {};
    }
}

QString CheckpointTreeModel::loadText(uint32_t node) const
{
    if (m_tree->marks.empty())
        return {};
    const LoadMark mark = m_tree->marks[node];
    if (mark == LoadMark::None || m_tree->nodes[node].kind != NodeKind::Group)
        return loadMarkName(mark);
    // A group counts the leaves that carry its worst mark: "12 kept at init", "90 loaded".
    QString what = loadMarkName(mark);
    if (mark == LoadMark::Loaded)
        what = tr("loaded");
    else if (mark == LoadMark::Mismatch)
        what = tr("mismatched");
    else if (mark == LoadMark::Problem && m_tree->markCounts[node] > 1)
        what = tr("problems");
    return tr("%1 %2").arg(formatCount(m_tree->markCounts[node]), what);
}

void CheckpointTreeModel::setLoadMarks(std::shared_ptr<const LoadMarkSet> set)
{
    Tree &t = *m_tree;
    const bool had = !t.marks.empty();
    t.marks.clear();
    t.markCounts.clear();
    t.markOf.clear();
    t.markSet.reset();
    if (set && !set->marks.empty() && !t.nodes.empty()) {
        t.markSet = std::move(set);
        t.marks.assign(t.nodes.size(), LoadMark::None);
        t.markCounts.assign(t.nodes.size(), 0);
        t.markOf.assign(t.nodes.size(), 0);
        const std::vector<KeyMark> &marks = t.markSet->marks;
        const std::vector<uint32_t> &byEntry = t.markSet->byEntry;
        if (t.markSet->index == m_index && m_index && byEntry.size() == m_index->itemCount()) {
            // The diff read this very index: each leaf's item has its mark.
            const size_t tensors = m_index->tensors.size();
            for (const uint32_t leaf : t.flat) {
                const Node &n = t.nodes[leaf];
                const size_t item = size_t(n.entry) + (n.kind == NodeKind::Tensor ? 0 : tensors);
                if (const uint32_t at = byEntry[item]) {
                    t.marks[leaf] = marks[at - 1].mark;
                    t.markOf[leaf] = at;
                }
            }
        } else {
            for (uint32_t i = 0; i < marks.size(); ++i) {
                const uint32_t leaf = t.leafByKey.find(marks[i].key);
                if (leaf == 0 || marks[i].mark <= t.marks[leaf])
                    continue;
                t.marks[leaf] = marks[i].mark;
                t.markOf[leaf] = i + 1;
            }
        }
        // Each group takes its children's worst mark and the count of leaves below with it.
        // Parents come before their children: one backward pass.
        for (size_t n = t.nodes.size() - 1; n > 0; --n) {
            const uint32_t parent = t.nodes[n].parent;
            const LoadMark m = t.marks[n];
            if (parent == NoNode || m == LoadMark::None)
                continue;
            const uint32_t count = t.nodes[n].kind == NodeKind::Group ? t.markCounts[n] : 1;
            if (m > t.marks[parent]) {
                t.marks[parent] = m;
                t.markCounts[parent] = count;
            } else if (m == t.marks[parent]) {
                t.markCounts[parent] += count;
            }
        }
    }
    if ((had || !t.marks.empty()) && rowCount() > 0) {
        // The view repaints what it shows; proxies re-filter the rows (and below) they hold.
        Q_EMIT dataChanged(
            index(0, 0), index(rowCount() - 1, ColumnCount - 1),
            {Qt::DisplayRole, Qt::ToolTipRole, LoadMarkRole, LoadMarkCountRole, SortRole});
    }
}

size_t CheckpointTreeModel::markedLeaves(LoadMark mark) const
{
    if (m_tree->marks.empty())
        return 0;
    size_t n = 0;
    for (const uint32_t leaf : m_tree->flat)
        n += m_tree->marks[leaf] == mark;
    return n;
}

QVariant CheckpointTreeModel::sortData(uint32_t node, int column) const
{
    const Node &n = m_tree->nodes[node];
    switch (column) {
    case NameColumn:
        return nodeName(node);
    case DTypeColumn:
        return displayData(node, column).toString();
    case ShapeColumn:
        return qulonglong(n.numel);
    case ChunksColumn:
        return qulonglong(n.chunks);
    case SizeColumn:
        return qulonglong(n.bytes);
    case LoadColumn:
        return m_tree->marks.empty() ? 0u : uint(m_tree->marks[node]);
    case StatusColumn:
        return uint(n.problemCount);
    default:
        return {};
    }
}

QVariant CheckpointTreeModel::data(const QModelIndex &index, int role) const
{
    if (!index.isValid() || index.model() != this)
        return {};
    const uint32_t node = uint32_t(index.internalId());
    const Node &n = m_tree->nodes[node];
    switch (role) {
    case Qt::DisplayRole:
        return displayData(node, index.column());
    case Qt::ToolTipRole:
        if (index.column() == StatusColumn && n.problemCount > 0 && n.kind != NodeKind::Group)
            return statusToolTip(node);
        if (index.column() == LoadColumn && !m_tree->markOf.empty() && m_tree->markOf[node])
            return describe(m_tree->markSet->marks[m_tree->markOf[node] - 1]);
        if (index.column() == NameColumn)
            return nodeKey(node);
        if (index.column() == SizeColumn && n.kind != NodeKind::Object)
            return tr("%1 bytes").arg(formatCount(n.bytes));
        return {};
    case Qt::TextAlignmentRole:
        if (index.column() == ChunksColumn || index.column() == SizeColumn)
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        return {};
    case KeyRole:
        return nodeKey(node);
    case KindRole:
        return int(n.kind);
    case NumelRole:
        return qlonglong(n.numel);
    case BytesRole:
        return qulonglong(n.bytes);
    case ChunkCountRole:
        return qulonglong(n.chunks);
    case LeafCountRole:
        return qulonglong(n.leaves);
    case LoadMarkRole:
        return m_tree->marks.empty() ? 0 : int(m_tree->marks[node]);
    case LoadMarkCountRole:
        return m_tree->marks.empty() ? 0 : int(m_tree->markCounts[node]);
    case HasProblemRole:
        return n.problemCount > 0;
    case ProblemCountRole:
        return int(n.problemCount);
    case DTypeRole:
        if (n.kind != NodeKind::Tensor)
            return QString();
        return displayData(node, DTypeColumn);
    case EntryIndexRole:
        return int(n.entry);
    case SortRole:
        return sortData(node, index.column());
    default:
        return {};
    }
}

QVariant CheckpointTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return {};
    if (role == Qt::TextAlignmentRole && (section == ChunksColumn || section == SizeColumn))
        return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    if (role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn:
        return tr("Name");
    case DTypeColumn:
        return tr("DType");
    case ShapeColumn:
        return tr("Shape");
    case ChunksColumn:
        return tr("Chunks");
    case SizeColumn:
        return tr("Size");
    case LoadColumn:
        return tr("Load");
    case StatusColumn:
        return tr("Status");
    default:
        return {};
    }
}

QHash<int, QByteArray> CheckpointTreeModel::roleNames() const
{
    QHash<int, QByteArray> names = QAbstractItemModel::roleNames();
    names.insert(KeyRole, "key");
    names.insert(KindRole, "kind");
    names.insert(NumelRole, "numel");
    names.insert(BytesRole, "bytes");
    names.insert(ChunkCountRole, "chunkCount");
    names.insert(HasProblemRole, "hasProblem");
    names.insert(ProblemCountRole, "problemCount");
    names.insert(DTypeRole, "dtype");
    names.insert(EntryIndexRole, "entryIndex");
    names.insert(SortRole, "sort");
    names.insert(LeafCountRole, "leafCount");
    names.insert(LoadMarkRole, "loadMark");
    names.insert(LoadMarkCountRole, "loadMarkCount");
    return names;
}

QModelIndex CheckpointTreeModel::indexForKey(const QString &key) const
{
    const std::string k = key.toStdString();
    const uint32_t leaf = m_tree->leafByKey.find(k);
    if (leaf == 0)
        return {};
    const Node &n = m_tree->nodes[leaf];
    return createIndex(int(m_flat ? n.flatRow : n.row), 0, quintptr(leaf));
}

void CheckpointTreeModel::setFlat(bool flat)
{
    if (flat == m_flat)
        return;
    beginResetModel();
    m_flat = flat;
    endResetModel();
}

const TensorEntry *CheckpointTreeModel::tensorAt(const QModelIndex &index) const
{
    if (!index.isValid() || index.model() != this)
        return nullptr;
    const Node &n = m_tree->nodes[index.internalId()];
    return n.kind == NodeKind::Tensor && !m_provisional ? &m_index->tensors[size_t(n.entry)]
                                                        : nullptr;
}

const ObjectEntry *CheckpointTreeModel::objectAt(const QModelIndex &index) const
{
    if (!index.isValid() || index.model() != this)
        return nullptr;
    const Node &n = m_tree->nodes[index.internalId()];
    return n.kind == NodeKind::Object && !m_provisional ? &m_index->objects[size_t(n.entry)]
                                                        : nullptr;
}

} // namespace shardscope::model
