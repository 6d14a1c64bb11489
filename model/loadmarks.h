// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

#include <cstdint>
#include <string>
#include <vector>

namespace shardscope {
struct DiffResult;
struct ParamCheck;
struct VerifyReport;
} // namespace shardscope

namespace shardscope::model {

/**
 * What the load does with a stored key, as the tree shows it: from the load diff, and after a
 * verification from what the real load did. Ordered by severity; a group shows its worst.
 * A partial load silently keeping a parameter at its initial values is the worst of all: it
 * raises nothing.
 */
enum class LoadMark : uint8_t {
    None,       ///< no diff yet, or the diff does not read it (objects, extra state)
    Loaded,     ///< the load reads it (the diff)
    Verified,   ///< the verified load reassembled it bit for bit
    Unconsumed, ///< no expected parameter reads it: a plain load ignores it silently
    Problem,    ///< the load raises on it or fills a parameter wrongly from it
    Mismatch,   ///< the verified load's values differ from a direct read
    Unreadable, ///< its data cannot be read
    KeptAtInit, ///< the parameter it holds is not filled from it: kept at its initial values
};

/** A short name for the Load column ("kept at init"). */
QString loadMarkName(LoadMark mark);
/** Marks at or above this one call for attention. */
constexpr LoadMark FirstAttentionMark = LoadMark::Unconsumed;

/** The mark of a verified parameter, as the tree shows it (None: not checked). */
LoadMark verifyMark(const ParamCheck &check);

struct KeyMark
{
    std::string key;
    LoadMark mark = LoadMark::None;
    std::string why; ///< the parameter and what happens to it, one line
};

/**
 * Every stored key the diff reads or leaves, marked by what the load does with it; with a
 * verification, its outcomes override the diff's for the keys each parameter draws from. A
 * key that feeds several parameters keeps the worst mark. Either may be null.
 */
std::vector<KeyMark> loadMarks(const DiffResult *diff, const VerifyReport *verification);

} // namespace shardscope::model
