// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace shardscope {
struct CheckpointIndex;
struct DiffEntry;
struct DiffResult;
struct ParamCheck;
struct UnconsumedKey;
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
/** A group's Load column: how many leaves below carry its worst mark ("12 kept at init"). */
QString groupLoadText(LoadMark worst, quint64 count);
/** Marks at or above this one call for attention. */
constexpr LoadMark FirstAttentionMark = LoadMark::Unconsumed;

/** The mark of a verified parameter, as the tree shows it (None: not checked). */
LoadMark verifyMark(const ParamCheck &check);

/** A stored key's mark and what it comes from (pointers into the set's snapshots). */
struct KeyMark
{
    std::string_view key;
    LoadMark mark = LoadMark::None;
    const DiffEntry *entry = nullptr;          ///< the parameter or state that reads it
    const UnconsumedKey *unconsumed = nullptr; ///< or: nothing reads it
    const ParamCheck *check = nullptr;         ///< the verification's verdict on `entry`
    bool unread = false; ///< it holds `entry`'s data, but the load does not read it
};

/** Every marked key, with the snapshots the marks point into (kept alive with them). */
struct LoadMarkSet
{
    std::shared_ptr<const DiffResult> diff;
    std::shared_ptr<const VerifyReport> verification;
    std::vector<KeyMark> marks; ///< one per key
    /** The index the diff read, when given: `byEntry` then maps each of its items (tensors,
     *  then objects) to 1 + its mark's place in `marks`, 0 when unmarked, so that the tree
     *  marks its leaves in one pass, hashing no key. */
    std::shared_ptr<const CheckpointIndex> index;
    std::vector<uint32_t> byEntry;
};

/**
 * Every stored key the diff reads or leaves, marked by what the load does with it; with a
 * verification, its outcomes override the diff's for the keys each parameter draws from. A
 * key that feeds several parameters keeps the worst mark. Tens of milliseconds at DeepSeek-V3
 * scale: run it off the GUI thread (the runner does). Null diff: an empty set. `index`: the one the
 * diff read (see LoadMarkSet::byEntry).
 */
std::shared_ptr<const LoadMarkSet> loadMarks(std::shared_ptr<const DiffResult> diff,
                                             std::shared_ptr<const VerifyReport> verification,
                                             std::shared_ptr<const CheckpointIndex> index = {});

/** One line: the parameter and what happens to it (the Load column's tooltip). */
QString describe(const KeyMark &mark);

} // namespace shardscope::model
