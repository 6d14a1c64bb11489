// SPDX-License-Identifier: MIT
// What the views offer and say about a load diff, from the backend's own lists and names, so
// that widgets never call the backend (they reach it only through the model layer).
#pragma once

#include <shardscope/diff.h>

#include <QList>
#include <QString>
#include <QStringList>

namespace shardscope::model {

struct RuleChoice
{
    QString name, description;
};
/** Every mapping rule the diff can switch off, in the backend's order. */
QList<RuleChoice> diffRules();
/** Megatron's strictness names; the index is the Strictness value. */
QStringList strictnessNames();
/** "loads", "raises", "silent", … */
QString loadActionName(LoadOutcome::Action action);
/** How many entries of `diff` are problems (shardscope::isLoadProblem(), as the CLI and the
 *  reports count them). */
size_t loadProblemCount(const DiffResult &diff);
/** One line: "Load: silent, 87 of 97 parameters filled, 10 silently kept at initial values,
 *  40 problems" (the problems counted as the report counts them). */
QString loadSummary(const DiffResult &diff);

} // namespace shardscope::model
