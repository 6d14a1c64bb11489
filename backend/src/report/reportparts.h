// SPDX-License-Identifier: MIT
// The report's parts shared by its output formats (model.cpp, text.cpp; markdown.cpp, html.cpp,
// json.cpp; render.cpp is the public door). Internal to the backend.
#pragma once

#include "shardscope/diff.h"
#include "shardscope/report.h"
#include "shardscope/valuediff.h"

#include "shardscope/keyfold.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace shardscope::report {

// Keys in the order written: "schema" first, entries read top-down.
using json = nlohmann::ordered_json;

// ---------------------------------------------------------------- text (text.cpp)

/** Names come from checkpoints: invalid UTF-8 and control characters become visible escapes. */
std::string validUtf8(std::string_view s);
std::string htmlEscape(std::string_view s);
std::string oneLine(std::string_view s);
/** An inline code span that no backtick in the text can close early (CommonMark). */
std::string mdCode(std::string_view s, bool inTable = false);
std::string mdBlock(std::string_view s, std::string_view lang = "text");
std::string mdEscape(std::string_view s);
/** Prose with its key-like words (keys, patterns, files, flags) as code. */
std::string mdProse(std::string_view s);
std::string htmlProse(std::string_view s);
std::string percent(size_t part, size_t whole);
std::string plural(size_t n, std::string_view one, std::string_view many);
std::string_view sectionName(Section s);
json torchReadableJson(const TorchReadability &r);

// ---------------------------------------------------------------- the model (model.cpp)

struct PatternCount
{
    std::string pattern;
    size_t count = 0;
};

struct KeyList
{
    std::vector<PatternCount> patterns;
    size_t total = 0; ///< distinct keys
};

struct FoldInput
{
    std::string category; ///< only items of one category fold together
    std::string name;     ///< folded exactly
    std::vector<SplitName> texts;
};

struct FoldGroup
{
    std::string pattern;
    std::vector<size_t> members; ///< indices into the input, ascending
    std::vector<std::string> texts;
};

// The value every member shares, or empty.
template<typename F>
std::string uniform(const std::vector<size_t> &members, F value)
{
    std::string first = value(members.front());
    for (size_t m : members)
        if (value(m) != first)
            return {};
    return first;
}

struct ProblemGroup
{
    Section section = Section::Model;
    LoadStatus status = LoadStatus::Ok;
    bool fills = true;
    std::string pattern;
    std::vector<size_t> entries;
    std::string reason, fix, fixExample, exampleName;
    std::string shape, dtype; ///< when all entries agree
    KeyList keys;             ///< on-disk keys drawn from
    KeyList requested;        ///< what a real load asks for
};

struct UnconsumedGroup
{
    std::string pattern;
    size_t count = 0;
    bool tensor = true;
    std::string note, shape, dtype;
};

struct DiffModel
{
    std::vector<ProblemGroup> groups;
    size_t problemEntries = 0;
    std::vector<UnconsumedGroup> unconsumed;
    KeyList keptAtInit, optimizerKeptAtInit, namedKeys;
};

inline constexpr KeyChange::Kind kKinds[] = {
    KeyChange::Kind::Removed, KeyChange::Kind::Added, KeyChange::Kind::Renamed,
    KeyChange::Kind::ShapeChanged, KeyChange::Kind::DtypeChanged};

using ChangeGroup = KeyChangeGroup;

KeyList foldKeys(const std::vector<std::string> &keys);
/**
 * Items whose names and texts differ only in their numeric fields, folded. A group's names
 * fold exactly; its texts field by field (they describe the names, mostly by the same numbers).
 */
std::vector<FoldGroup> foldItems(const std::vector<FoldInput> &items);
DiffModel buildModel(const DiffResult &diff);
size_t countOf(const CheckpointDiff &diff, KeyChange::Kind k);

std::string strictnessFlag(const DiffOptions &o);
std::string atInit(size_t n);
std::string keptHeadline(size_t n, LoadOutcome::Action a);
std::string optimizerKeptHeadline(size_t n);
std::string keptExplanation(LoadOutcome::Action a);
inline constexpr size_t kShownKeys = 5;
/** A fix that is a command line reads best as a code block, prose as prose. */
bool isCommand(std::string_view fix);

// ---------------------------------------------------------------- values (valuesmodel.cpp)

/** Tensors of one verdict whose names fold together (and, not compared, for one reason). */
struct ValueGroup
{
    TensorValueDiff::Verdict verdict = TensorValueDiff::Verdict::Identical;
    std::string pattern;
    std::vector<size_t> members; ///< into ValueDiffResult::tensors
    size_t worst = 0;            ///< the member with the largest relative L2 difference
};
/** Not compared first; then different, worst first; within tolerance; identical. */
std::vector<ValueGroup> valueGroups(const ValueDiffResult &r);
/** One tensor's figures on one line ("12 of 4096 differ (first at [3, 0]); max |a−b| …"). */
std::string valueFigures(const TensorValueDiff &t);
/** "126 tensors: 3 not compared, 117 identical, 4 within tolerance, 2 different". */
std::string valueSummary(const ValueDiffResult &r);
/** What the result means and its exit code: "40 not compared; the 336 compared are identical
 *  (exit 1; …)", "every tensor compared and identical (exit 0)". */
std::string valueVerdict(const ValueDiffResult &r);

// ---------------------------------------------------------------- the formats

std::string markdownReport(const DiffResult &diff, const ReportContext &ctx);
std::string markdownCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx,
                                     const ValueDiffResult *values);
std::string htmlReport(const DiffResult &diff, const ReportContext &ctx);
std::string htmlCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx,
                                 const ValueDiffResult *values);
std::string jsonReport(const DiffResult &diff, const ReportContext &ctx);
std::string jsonCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx,
                                 const ValueDiffResult *values);
json diffJson(const DiffResult &diff);
json checkpointDiffJson(const CheckpointDiff &diff);
/** Indented by one space, newline-terminated; invalid UTF-8 replaced (dump() would throw). */
std::string dump(const json &j);

} // namespace shardscope::report
