// SPDX-License-Identifier: MIT
// The load marks over the tree: each stored key's mark from the diff (or the verification),
// each group's worst below and how many leaves carry it.
#include "checkpointtreemodel_p.h"

#include "formatting.h"

#include <shardscope/checkpoint.h>

namespace shardscope::model {

QString CheckpointTreeModel::loadText(uint32_t node) const
{
    if (m_tree->marks.empty())
        return {};
    const LoadMark mark = m_tree->marks[node];
    if (mark == LoadMark::None || m_tree->nodes[node].kind != NodeKind::Group)
        return loadMarkName(mark);
    // A group counts the leaves that carry its worst mark: "12 kept at init", "90 loaded".
    return groupLoadText(mark, m_tree->markCounts[node]);
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

} // namespace shardscope::model
