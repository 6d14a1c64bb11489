// SPDX-License-Identifier: MIT
// What a repaired checkpoint holds: the keys the failing load asks for, each built from the
// stored chunks that hold its data (found by the diff with every rule on), pointing at the same
// bytes; the keys only those read dropped; everything else as it was.
#pragma once

#include "shardscope/checkpoint.h"
#include "shardscope/diff.h"
#include "shardscope/fix.h"
#include "shardscope/tensor.h"

#include <string>
#include <vector>

namespace shardscope::detail {

/** Stored data a rewritten key takes: a box of a stored tensor (its stacked entry, the rows),
 *  placed at `at` along the key's dimension `dim`. */
struct RewritePiece
{
    /** A copy (the key may be dropped from the repaired index) of the stored tensor with only
     *  the chunks the box meets. */
    TensorEntry stored;
    Box box;
    int64_t at = 0;
    /** Its entry on the key's leading stacked axes (torch_dist: a layer, an expert), if any. */
    std::vector<int64_t> lead;
};

/** A key that chunk references cannot express, written whole into the new data file. */
struct Rewrite
{
    size_t tensor = 0; ///< index into FixPlan::tensors (then from FixPlan::firstNew on)
    size_t dim = 0;    ///< along the key's shape after its `lead` stacked axes
    size_t lead = 0;   ///< leading stacked axes, each piece filling one entry of them
    std::vector<RewritePiece> pieces;
};

/** A new object whose bytes the repair writes (a torch.save archive, as DCP stores bytes). */
struct ObjectWrite
{
    size_t object = 0; ///< index into FixPlan::objects (then from FixPlan::firstNewObject on)
    std::string bytes;
};

struct FixPlan
{
    std::vector<size_t> dropped;        ///< the source's tensors left out, ascending
    std::vector<size_t> droppedObjects; ///< the source's objects left out, ascending
    std::vector<TensorEntry> tensors;   ///< the new keys
    /** Per new key: the stored key it is, whole, under a new name (a rename); empty for any
     *  other (a section, an entry, a concatenation, a rewrite). */
    std::vector<std::string> origins;
    std::vector<ObjectEntry> objects;
    std::vector<FixChangeCount> changes;
    std::vector<std::string> blockers;
    std::vector<FixUnused> unused; ///< stored tensors no parameter uses: left out or kept
    std::vector<Rewrite> rewrites;
    std::vector<ObjectWrite> objectWrites;
    size_t firstNew = 0;       ///< where applyFix() put the new keys in the repaired index
    size_t firstNewObject = 0; ///< and the new objects
    uint64_t bytesReferenced = 0, bytesRewritten = 0;
    bool empty() const { return changes.empty(); }
};

/** The stored tensors `asked` (the diff as the load asks) says no parameter uses, by index
 *  into source.tensors: left out where the load raises on them (a strict load_state_dict),
 *  kept where it does not read them. */
std::vector<std::pair<size_t, FixUnused>> unusedTensors(const CheckpointIndex &source,
                                                        const DiffResult &asked);

/**
 * `asked`: the diff with the user's options (what the failing load requests); `found`: the same
 * diff with every rule on (where the data is). Every entry the load does not fill becomes a key
 * built from `found`'s sources, or a blocker saying why it cannot.
 */
FixPlan planFix(const CheckpointIndex &source, const DiffResult &asked, const DiffResult &found);

/** The repaired index: `source` (moved in when the caller owns it) without the dropped keys,
 *  with the new ones. The plan's entries are moved out. */
CheckpointIndex applyFix(CheckpointIndex source, FixPlan &plan);

} // namespace shardscope::detail
