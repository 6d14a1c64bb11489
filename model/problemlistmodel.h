// SPDX-License-Identifier: MIT
#pragma once

#include "keymatcher.h"
#include "snapshots.h"

#include <QAbstractItemModel>

#include <shardscope/report.h>
#include <shardscope/session.h>

#include <memory>
#include <vector>

namespace shardscope::model {

/**
 * Every problem in one list, in one vocabulary: the load's first (once there is a diff: the
 * entries the report calls problems, folded as the report folds them, shardscope::
 * foldDiffEntries), then the reading's (CheckpointIndex::problems folded by cause and file,
 * shardscope::groupProblems). A problem of its own is a row (key, where it is stored, byte
 * offset, what the load does, why); a group of many is one row ("7,200 keys", …) whose children
 * are its problems, so that a missing data file is one expandable row, not thousands of
 * identical ones. KeyRole is the stored key the tree shows for a row.
 */
class ProblemListModel : public QAbstractItemModel
{
    Q_OBJECT

public:
    enum Column : int {
        KeyColumn,
        FileColumn,
        OffsetColumn,
        EffectColumn,
        MessageColumn,
        ColumnCount,
    };

    explicit ProblemListModel(QObject *parent = nullptr);
    ~ProblemListModel() override;

    void setIndex(std::shared_ptr<const CheckpointIndex> index);
    /** The load's problems (null: no diff) as `folded` folds them (foldLoadProblems(); null
     *  until they are folded: none listed yet, isFolding()). */
    void setDiff(DiffSnapshot diff, FoldedProblemsSnapshot folded);
    /** The diff's problems, folded (for the diff setDiff() was given). */
    void setFolded(FoldedProblemsSnapshot folded);
    /** A diff whose problems are being folded. */
    bool isFolding() const { return m_diff && !m_folded; }
    /** While deferred (its view is not shown), a key filter's change folds nothing; the rows
     *  follow once it is not. */
    void setDeferred(bool deferred);
    void clear()
    {
        setDiff(nullptr, nullptr);
        setIndex(nullptr);
    }
    /** The reading problem of a top-level row that holds one (a group of one); null else. */
    const Problem *problemAt(int row) const;
    /** The problems shown (those whose key the filter matches), however folded: the load's
     *  and the reading's. */
    int problemCount() const { return loadProblemCount() + readingProblemCount(); }
    int loadProblemCount() const { return int(m_loadShown.size()); }
    int readingProblemCount() const { return int(m_shown.size()); }
    /** Every problem, filtered or not. */
    int totalProblemCount() const;
    /** Whether there is a diff (a load to have problems). */
    bool hasDiff() const { return m_diff != nullptr; }
    /** Only the problems whose key matches, as the tree's filter text matches keys. */
    void setKeyFilter(const QString &text);

    QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override;
    QModelIndex parent(const QModelIndex &child) const override;
    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    const Problem *problemOf(const QModelIndex &index) const;
    QVariant loadData(const QModelIndex &index, int role) const;

    void regroup();

    std::shared_ptr<const CheckpointIndex> m_index;
    DiffSnapshot m_diff;
    KeyMatcher m_matcher;
    std::vector<Problem> m_shown; ///< the reading problems the filter matches
    std::vector<ProblemGroup> m_groups;
    FoldedProblemsSnapshot m_folded;            ///< every problem of m_diff
    std::vector<size_t> m_loadShown;            ///< the load's problem entries the filter matches
    std::vector<DiffEntryGroup> m_loadGroups;   ///< top-level rows before m_groups'
    std::vector<std::string_view> m_keptAtInit; ///< sorted
    bool m_deferred = false, m_stale = false;
};

} // namespace shardscope::model
