// SPDX-License-Identifier: MIT
#pragma once

#include "loadmarks.h"
#include "roles.h"

#include <QAbstractItemModel>
#include <QStringList>

#include <functional>
#include <memory>
#include <string_view>

namespace shardscope {
struct CheckpointIndex;
struct TensorEntry;
struct ObjectEntry;
struct Problem;
} // namespace shardscope

namespace shardscope::model {

/**
 * The keys of a checkpoint as a tree grouped by dotted prefix (or by the entry's true nesting
 * when the format records one), over an immutable CheckpointIndex snapshot.
 *
 * Storage is compact: one vector of nodes (internalId = node id), names in one string pool, the
 * children of each node as a contiguous slice of one id vector. Chunks are never rows; a tensor
 * with thousands of chunks is one leaf. Leaves report Qt::ItemNeverHasChildren so views can
 * expand and collapse huge trees cheaply.
 *
 * GUI thread only. setIndex() resets the model; the snapshot is shared, never copied.
 */
class CheckpointTreeModel : public QAbstractItemModel
{
    Q_OBJECT

public:
    explicit CheckpointTreeModel(QObject *parent = nullptr);
    ~CheckpointTreeModel() override;

    /**
     * Flat: every entry a top-level row named by its full key (a filter's matches each read in
     * full, at any depth); else the tree. Switching resets the model.
     */
    void setFlat(bool flat);
    bool isFlat() const { return m_flat; }
    /** Replaces the contents (model reset). A null snapshot empties the model. */
    void setIndex(std::shared_ptr<const CheckpointIndex> index);
    /**
     * The tree of a snapshot, built on any thread (seconds at DeepSeek-V3 scale: the runner
     * builds it on its lane, next to the open), for adopt() on the model's thread.
     */
    struct Prepared;
    static std::shared_ptr<Prepared> prepare(std::shared_ptr<const CheckpointIndex> index);
    /** Threads a tree is built on: 0 (the default) two from 100,000 entries, else one. The
     *  tree is the same either way; tests compare. */
    static void setBuildThreads(int threads);
    /**
     * The tree of an index still being read (OpenOptions::onKeysKnown: keys, nesting, shapes,
     * dtypes and chunk counts final, nothing else), built on that reading thread. It keeps a
     * copy of those fields (Prepared's index); problems and stored locations come with
     * completeIndex().
     */
    static std::shared_ptr<Prepared> prepareKeys(const CheckpointIndex &keys);
    /**
     * The top-level rows of prepare()'s tree (names, chains folded alike, sums; problems are
     * left to the whole tree), in one pass over the keys and on any thread: a big checkpoint's
     * first paint while prepare() builds the rest, for a tenth of its time. Provisional: its
     * groups show no rows below them yet, and adopting the whole tree resets the model.
     */
    static std::shared_ptr<Prepared> prepareTop(std::shared_ptr<const CheckpointIndex> index);
    /** The index a prepared tree shows (prepareKeys(): its copy of the keys). */
    static std::shared_ptr<const CheckpointIndex> indexOf(const Prepared &prepared);
    /** Whether `full` holds the entries a prepareKeys() tree was built from, in order (any
     *  thread; a pass over every key). */
    static bool sameEntries(const CheckpointIndex &keys, const CheckpointIndex &full);
    /** setIndex() with a tree prepare() built; one model adopts it (it is moved from). */
    void adopt(std::shared_ptr<Prepared> prepared);
    /**
     * Swaps a prepareKeys() tree's index for the finished one (sameEntries() checked by the
     * caller): the rows stay, problems and stored sizes fill in (dataChanged). False, changing
     * nothing, when the model holds no such tree or the entry counts differ.
     */
    bool completeIndex(std::shared_ptr<const CheckpointIndex> full);
    /** A prepareKeys() tree waiting for completeIndex(): no entry is read yet (tensorAt() and
     *  objectAt() answer nullptr). */
    bool isProvisional() const { return m_provisional; }
    /** A prepareTop() tree: the top-level rows only, the whole tree on its way. */
    bool isTopOnly() const;
    void clear() { setIndex(nullptr); }
    const std::shared_ptr<const CheckpointIndex> &checkpointIndex() const { return m_index; }

    QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override;
    QModelIndex parent(const QModelIndex &child) const override;
    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    bool hasChildren(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex &index) const override;
    QHash<int, QByteArray> roleNames() const override;

    /** The leaf whose full key is `key` (column 0); invalid when there is none. */
    QModelIndex indexForKey(const QString &key) const;
    /** The entry behind a leaf of this model; nullptr for groups and foreign indexes. */
    const TensorEntry *tensorAt(const QModelIndex &index) const;
    const ObjectEntry *objectAt(const QModelIndex &index) const;
    /** The problems that name the leaf's key (empty for groups). */
    std::vector<const Problem *> problemsAt(const QModelIndex &index) const;
    /** Distinct torch dtype names of the tensors, sorted. */
    QStringList dtypeNames() const { return m_dtypeNames; }
    /**
     * What the load does with each stored key (loadMarks()), replacing the marks before; an
     * empty list clears them. Groups show their worst mark and how many leaves carry it. The
     * Load column and LoadMarkRole change (dataChanged); the rows stay.
     */
    void setLoadMarks(std::shared_ptr<const LoadMarkSet> marks);
    /** Leaves whose mark is `mark`. */
    size_t markedLeaves(LoadMark mark) const;
    /** A leaf as bulk filtering reads it (views into the snapshot). */
    struct LeafInfo
    {
        uint32_t node = 0; ///< the internalId of its indexes
        std::string_view key;
        std::string_view dtype; ///< empty for objects
        bool problem = false;   ///< the reader flagged it
        LoadMark mark = LoadMark::None;
        uint64_t chunks = 0, bytes = 0;
    };
    /** Calls `fn` for every leaf, in entry order: one pass, no QVariant, no QString. */
    void forEachLeaf(const std::function<void(const LeafInfo &)> &fn) const;
    /** The node above `node` (the internalId of indexes); NoParent at the top. */
    uint32_t parentNode(uint32_t node) const;
    static constexpr uint32_t NoParent = 0;
    /** Nodes in the tree, the invisible root included. */
    size_t nodeCount() const;

private:
    struct Tree;
    static std::shared_ptr<Prepared> prepareFrom(const CheckpointIndex &source,
                                                 std::shared_ptr<const CheckpointIndex> owner);
    static void bindKeys(Tree &tree, const CheckpointIndex *entries);
    static void summarise(Tree &tree, const CheckpointIndex &index);
    QString nodeName(uint32_t node) const;
    QString nodeKey(uint32_t node) const;
    QVariant displayData(uint32_t node, int column) const;
    QVariant sortData(uint32_t node, int column) const;
    QString statusText(uint32_t node) const;
    QString statusToolTip(uint32_t node) const;
    QString loadText(uint32_t node) const;

    std::shared_ptr<const CheckpointIndex> m_index;
    std::unique_ptr<Tree> m_tree;
    bool m_flat = false;
    bool m_provisional = false;
    QStringList m_dtypeNames;
};

} // namespace shardscope::model
