// SPDX-License-Identifier: MIT
// Folding of repeated names ("layers.3.", "layers.4.", … → "layers.{3..60}."): the one
// algorithm behind reports, problem groups and the CLI's key tree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** A name cut at its numeric fields: pieces.size() == values.size() + 1. */
struct SplitName
{
    std::vector<std::string> pieces;
    std::vector<int64_t> values;
};

/**
 * The numeric fields of a key: a dotted component that is a number ("layers.3.",
 * "local_experts.5.") and the index right after a component's leading "weight"/"bias"
 * ("weight5", "weight5_w"). Other digits ("linear_fc1", "model0") are part of the name; so are
 * numbers with leading zeros, which would not survive the round trip.
 */
SplitName splitName(std::string_view name);

/**
 * The numeric fields of free text (a reason, a fix): those of every dotted key in it, and a
 * number that follows the word "layer" or "expert". Other numbers (shapes, dims) stay text.
 */
SplitName splitText(std::string_view text);

/**
 * Sorted, unique values as "5", "{3..60}", "{1,4,7}" or "{0..3,7,9..12}": a contiguous set is a
 * range, and inside a list so is every run of three or more.
 */
std::string foldValues(const std::vector<int64_t> &sortedUnique);

struct FoldedName
{
    std::string pattern;
    std::vector<size_t> members; ///< indices into the input, ascending
};

/**
 * Folds names into patterns whose expansion is exactly the input set: a pattern's ranges are
 * all there in every combination (irregular sets give several patterns). Names fold together
 * only with names of the same text around the fields. Patterns come in order of first
 * appearance; duplicate names share a pattern.
 */
std::vector<FoldedName> foldNames(const std::vector<std::string> &names);

/**
 * Texts that split to the same pieces, folded field by field into one pattern (each field the
 * set of values it takes). Unlike foldNames it does not keep combinations apart: for describing
 * a group whose names foldNames already made exact.
 */
std::string foldTexts(const std::vector<SplitName> &texts);

} // namespace shardscope
