// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/diff.h"
#include "shardscope/fix.h"
#include "shardscope/valuediff.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

enum class ReportFormat : uint8_t { Markdown, Html, Json };

/** From the file name's extension (.md, .html/.htm, .json; any case); nullopt otherwise. */
std::optional<ReportFormat> reportFormatForPath(std::string_view path);

/** The command line that runs `argv`, each argument shell-quoted where it needs it ('…', with
 *  ' as '\''); what a report prints as the command that reproduces it. */
std::string shellCommand(const std::vector<std::string> &argv);

struct ReportContext
{
    std::string command;     ///< the exact command line that reproduces the report
    std::string generatedAt; ///< ISO 8601 time; may be empty (reproducible output)
};

/**
 * A report of a checkpoint-against-layout diff: summary (what a real load would do, and the
 * parameters it would silently keep at their initial values), problems grouped with repeated
 * layers and experts folded into ranges, unconsumed keys, and the command that reproduces it.
 * Html is one self-contained file (inline CSS, no scripts, nothing fetched). Json is
 * {"schema": "shardscope.report/1", "command", "summary", "groups", "unconsumed", "diff"}.
 */
std::string renderReport(const DiffResult &diff, ReportFormat format, const ReportContext &ctx);

/** The same for a checkpoint-against-checkpoint diff: counts per change kind, then changes;
 *  with `values`, a section on the value differences (worst first, repeated layers folded). */
std::string renderCheckpointDiffReport(const CheckpointDiff &diff, ReportFormat format,
                                       const ReportContext &ctx,
                                       const ValueDiffResult *values = nullptr);

/** Entries of a diff folded as its report folds its problems. */
struct DiffEntryGroup
{
    std::string pattern;         ///< expands to exactly the members' names (`layers.{0..60}.…`)
    std::vector<size_t> entries; ///< into DiffResult::entries, ascending
    std::string reason, fix;     ///< the members' texts, folded field by field
};

/**
 * The entries `which` (indices into diff.entries) folded: entries of one section, status and
 * fill whose names, reasons and fixes differ only in their numeric fields share a group, one
 * group per exact pattern. Groups the real load does not fill come first, then by section,
 * otherwise in the entries' order. The report's problem groups are these.
 */
std::vector<DiffEntryGroup> foldDiffEntries(const DiffResult &diff,
                                            const std::vector<size_t> &which);

/** Unconsumed keys folded as the report folds them (tensors and objects apart, by note). */
struct UnconsumedKeyGroup
{
    std::string pattern;
    std::vector<size_t> keys; ///< into DiffResult::unconsumed, ascending
    std::string note;         ///< folded field by field
};
std::vector<UnconsumedKeyGroup> foldUnconsumed(const DiffResult &diff);

/** Changes of a checkpoint diff folded as its report folds them. */
struct KeyChangeGroup
{
    KeyChange::Kind kind = KeyChange::Kind::Added;
    std::string rule;
    std::string pattern;         ///< expands to exactly the members' keys
    std::string otherPattern;    ///< renamed: the members' keys in the second, folded
    std::string detail;          ///< the members' details, folded field by field
    std::vector<size_t> changes; ///< into CheckpointDiff::changes, ascending
};

/**
 * Changes of one kind and rule whose keys, other keys and details differ only in their numeric
 * fields share a group, one group per exact pattern; removed first, then added, renamed, shape
 * and dtype changes, otherwise in the changes' order. The report's change groups are these.
 */
std::vector<KeyChangeGroup> foldKeyChanges(const CheckpointDiff &diff);

/** Every field of a DiffResult as JSON (schema "shardscope.diff/1"), indented by one space. */
std::string diffToJson(const DiffResult &diff);

/** Every field of a CheckpointDiff as JSON (schema "shardscope.checkpoint-diff/1"). */
std::string checkpointDiffToJson(const CheckpointDiff &diff);

/** What a fix did (schema "shardscope.fix-result/1"), the diff of its output included. */
std::string fixToJson(const FixResult &fix);

} // namespace shardscope
