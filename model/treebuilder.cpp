// SPDX-License-Identifier: MIT
// Building the tree: one pass over the entries (two threads past a few hundred thousand), then
// the children's slices, then the compaction; prepare() runs off the GUI thread.
#include "checkpointtreemodel_p.h"

#include <shardscope/checkpoint.h>

#include <algorithm>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace shardscope::model {

namespace {

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
    std::string_view nameOf(const Node &n) const
    {
        return std::string_view(*m_names).substr(n.nameOffset, n.nameLength);
    }

    void segmentsOf(std::string_view key, const KeyPath &path, std::vector<std::string_view> &out)
    {
        keySegments(key, path, m_parts, out);
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

void keySegments(std::string_view key, const KeyPath &path, std::vector<std::string_view> &parts,
                 std::vector<std::string_view> &out)
{
    out.clear();
    // Components that join to the key, each split at its dots: the key split at every dot.
    if (path.explicitParts().empty()) {
        splitKey(key, out);
        return;
    }
    path.partsInto(key, parts);
    for (std::string_view p : parts)
        splitKey(p, out);
}

namespace {
std::atomic<int> s_buildThreads{0};

// The dtype names of the tensors, sorted (views into the snapshot or static names).
QStringList dtypeNamesOf(const CheckpointIndex &index)
{
    std::set<std::string_view> names;
    std::string_view last;
    for (const TensorEntry &t : index.tensors) {
        const std::string_view d =
            t.dtypeName.empty() ? dtypeName(t.dtype) : std::string_view(t.dtypeName);
        if (d != last) // runs of one dtype are the rule
            names.insert(last = d);
    }
    QStringList out;
    for (std::string_view d : names)
        out.push_back(QString::fromUtf8(d.data(), qsizetype(d.size())));
    return out;
}
} // namespace

void CheckpointTreeModel::setBuildThreads(int threads)
{
    s_buildThreads = threads;
}

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

    prepared->dtypes = dtypeNamesOf(*owner);

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

std::shared_ptr<CheckpointTreeModel::Prepared>
CheckpointTreeModel::prepareTop(std::shared_ptr<const CheckpointIndex> index)
{
    if (!index)
        return prepare(nullptr);
    // prepare() makes a top-level group for each distinct first segment, in the order of the
    // entries, and folds it with its only child while that child is a group: its row names the
    // group segments every key below it shares (a key whose groups end sooner ends the chain,
    // being a leaf beside the next group). Leaves are rows of their own, never merged.
    auto tree = std::make_unique<Tree>();
    tree->topOnly = true;
    std::vector<Node> &nodes = tree->nodes;
    nodes.push_back(Node{});
    std::vector<std::vector<std::string_view>> chains; // per node: the shared group segments
    chains.emplace_back();
    std::string lastChain; // the previous key's group's chain, joined by dots
    std::unordered_map<std::string_view, uint32_t> groups; // first segment → node
    std::vector<std::string_view> parts, segments;
    uint32_t last = NoNode; // the previous key's group: keys come grouped
    const size_t tensors = index->tensors.size();
    const size_t entries = tensors + index->objects.size();
    for (size_t e = 0; e < entries; ++e) {
        const bool tensor = e < tensors;
        const TensorEntry *t = tensor ? &index->tensors[e] : nullptr;
        const ObjectEntry *o = tensor ? nullptr : &index->objects[e - tensors];
        const std::string_view key = tensor ? t->key.view() : o->key.view();
        const KeyPath &path = tensor ? t->path : o->path;
        uint32_t id;
        // Most keys go on with the previous key's group and all of its chain: their segments
        // (the key split at every dot) begin with the chain's, and at least the leaf follows.
        if (last != NoNode && path.explicitParts().empty() && key.size() > lastChain.size() &&
            key[lastChain.size()] == '.' && key.starts_with(lastChain)) {
            id = last;
        } else {
            keySegments(key, path, parts, segments);
            if (segments.size() <= 1) { // a top-level leaf
                id = uint32_t(nodes.size());
                Node &leaf = nodes.emplace_back();
                leaf.parent = RootNode;
                leaf.kind = tensor ? NodeKind::Tensor : NodeKind::Object;
                leaf.entry = int32_t(tensor ? e : e - tensors);
                const std::string_view name = segments.empty() ? std::string_view() : segments[0];
                leaf.nameOffset = uint32_t(tree->names.size());
                leaf.nameLength = uint32_t(name.size());
                tree->names.append(name);
                chains.emplace_back();
            } else {
                const size_t groupCount = segments.size() - 1;
                if (last != NoNode && chains[last].front() == segments[0]) {
                    id = last;
                } else if (auto it = groups.find(segments[0]); it != groups.end()) {
                    id = it->second;
                } else {
                    id = uint32_t(nodes.size());
                    groups.emplace(segments[0], id);
                    nodes.emplace_back().parent = RootNode;
                    chains.emplace_back(segments.begin(), segments.begin() + ptrdiff_t(groupCount));
                }
                std::vector<std::string_view> &chain = chains[id];
                const size_t had = chain.size();
                size_t shared = 1;
                while (shared < chain.size() && shared < groupCount &&
                       chain[shared] == segments[shared])
                    ++shared;
                chain.resize(shared);
                if (id != last || shared != had || lastChain.empty()) {
                    lastChain.clear();
                    for (size_t k = 0; k < chain.size(); ++k) {
                        if (k)
                            lastChain += '.';
                        lastChain.append(chain[k]);
                    }
                }
                last = id;
            }
        }
        Node &n = nodes[id];
        ++n.leaves;
        if (tensor) {
            n.numel += uint64_t(std::max<int64_t>(t->numel(), 0));
            n.bytes += t->nbytes();
            n.chunks += t->chunks.size();
        } else if (o->location) {
            n.bytes += o->location->length;
        }
    }
    tree->children.resize(nodes.size() - 1);
    nodes[RootNode].childCount = uint32_t(nodes.size() - 1);
    for (uint32_t id = 1; id < nodes.size(); ++id) {
        Node &n = nodes[id];
        Node &root = nodes[RootNode];
        root.leaves += n.leaves;
        root.numel += n.numel;
        root.bytes += n.bytes;
        root.chunks += n.chunks;
        n.row = id - 1;
        tree->children[id - 1] = id;
        if (n.kind == NodeKind::Group) {
            n.nameOffset = uint32_t(tree->names.size());
            for (size_t k = 0; k < chains[id].size(); ++k) {
                if (k)
                    tree->names += '.';
                tree->names.append(chains[id][k]);
            }
            n.nameLength = uint32_t(tree->names.size() - n.nameOffset);
        } else {
            n.flatRow = uint32_t(tree->flat.size());
            tree->flat.push_back(id);
        }
    }
    bindKeys(*tree, index.get());
    tree->leafByKey.build(tree->flat);

    auto prepared = std::make_shared<Prepared>();
    prepared->dtypes = dtypeNamesOf(*index);
    prepared->index = std::move(index);
    prepared->tree = std::move(tree);
    prepared->provisional = true;
    return prepared;
}

void CheckpointTreeModel::bindKeys(Tree &tree, const CheckpointIndex *entries)
{
    const std::vector<Node> *all = &tree.nodes;
    tree.leafByKey.rebind([entries, all](uint32_t n) -> std::string_view {
        const Node &node = (*all)[n];
        return node.kind == NodeKind::Tensor ? entries->tensors[size_t(node.entry)].key.view()
                                             : entries->objects[size_t(node.entry)].key.view();
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

} // namespace shardscope::model
