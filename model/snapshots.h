// SPDX-License-Identifier: MIT
// The results the window looks at, each an immutable snapshot shared read-only by every view
// (and the metatypes that carry them through queued signals). Views include this, never the
// threads that compute them.
#pragma once

#include <shardscope/report.h>
#include <shardscope/session.h>

#include <QMetaType>

#include <memory>
#include <vector>

namespace shardscope::model {

using IndexSnapshot = std::shared_ptr<const shardscope::CheckpointIndex>;
using DiffSnapshot = std::shared_ptr<const shardscope::DiffResult>;
using VerifySnapshot = std::shared_ptr<const shardscope::VerifyReport>;
using CompareSnapshot = std::shared_ptr<const shardscope::CheckpointDiff>;
using ValuesSnapshot = std::shared_ptr<const shardscope::ValueDiffResult>;

/**
 * `value` as a snapshot whose last holder, whichever thread it is on, frees it on a worker
 * thread: a rule toggled at DeepSeek-V3 scale replaces a load diff of 123,000 entries (half a
 * million strings), and freeing the old one on the GUI thread held it for 0.1 s.
 */
std::shared_ptr<const DiffResult> freedOffThread(DiffResult &&value);

/** A diff's problem entries (shardscope::isLoadProblem()), folded as the report folds them:
 *  tens of thousands at DeepSeek-V3 scale with a rule off, folded off the GUI thread. */
struct FoldedLoadProblems
{
    std::vector<size_t> entries; ///< into DiffResult::entries
    std::vector<DiffEntryGroup> groups;
};
using FoldedProblemsSnapshot = std::shared_ptr<const FoldedLoadProblems>;
FoldedProblemsSnapshot foldLoadProblems(const DiffResult &diff);

/** Registers the model's value types for queued connections and QSignalSpy. Idempotent. */
void registerMetaTypes();

} // namespace shardscope::model

Q_DECLARE_METATYPE(shardscope::model::IndexSnapshot)
Q_DECLARE_METATYPE(shardscope::model::DiffSnapshot)
Q_DECLARE_METATYPE(shardscope::model::VerifySnapshot)
Q_DECLARE_METATYPE(shardscope::model::CompareSnapshot)
Q_DECLARE_METATYPE(shardscope::model::ValuesSnapshot)
Q_DECLARE_METATYPE(shardscope::model::FoldedProblemsSnapshot)
