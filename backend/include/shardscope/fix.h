// SPDX-License-Identifier: MIT
// A repaired checkpoint: what `fix` changed, what blocks it, what it wrote.
#pragma once

#include "shardscope/checkpoint.h"
#include "shardscope/diff.h"
#include "shardscope/torchcompat.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardscope {

/** One kind of change a fix made, counted, with a few examples ("NEW <- OLD"). */
struct FixChangeCount
{
    /** "rename", "concatenate" (sections stored apart, one key asked for), "split" (a section
     *  of a key stored fused), "select" (one entry of a stacked key), "rewrite" (a key chunk
     *  references cannot express, copied into a new data file), "group" (a parameter's
     *  param_to_group_meta leaves), "drop" (a stored key only the repaired ones read),
     *  "leave out" (a stored tensor no parameter uses, on which the strict load raises). */
    std::string kind;
    size_t count = 0;
    std::vector<std::string> examples;
};

/** A stored tensor no parameter of the model uses, and what the repair did with it. */
struct FixUnused
{
    std::string key;
    bool kept = true; ///< false: left out of the output (the strict load raises on it)
    std::string why;
};

/** The load as asked fills every parameter and optimizer state and raises on nothing. A
 *  stored tensor nobody asks for does not count: the load ignores it (DCP) or it is gone. */
inline bool loadsEveryParameter(const DiffResult &d)
{
    if (d.outcome.action != LoadOutcome::Action::Loads || (d.options.failOnCast && d.lossyCasts))
        return false;
    for (const DiffEntry &e : d.entries)
        if (!e.realLoadFills)
            return false;
    return true;
}

struct FixResult
{
    std::string checkpoint, layout, output;
    std::string format;
    DiffOptions options;
    /** The checkpoint already loads as asked: nothing to repair, nothing written. */
    bool alreadyLoads = false;
    bool written = false;
    std::vector<FixChangeCount> changes;
    /** Why a parameter cannot be repaired (one line each); without --partial any
     *  of them means nothing is written. */
    std::vector<std::string> blockers;
    /** Stored tensors no parameter uses: left out (the strict load raises on them) or kept. */
    std::vector<FixUnused> unused;
    /** Data files that were symlinks to files outside the checkpoint: copied into the output
     *  (a hard link would share the outside file's inode), as "NAME -> TARGET". */
    std::vector<std::string> copiedFromOutside;
    /** Written, and the output read back: what the load as asked still fails on (empty: it
     *  loads every parameter). The output is kept, its manifest says it is no repair. */
    std::string stillFails;
    /** Bytes of stored tensor data the new metadata points at (the repaired keys' chunks) and
     *  bytes of tensor data written into the new data file (0: references only). */
    uint64_t bytesReferenced = 0, bytesWritten = 0;
    uint64_t metadataBytes = 0;
    size_t filesLinked = 0, filesSymlinked = 0, filesCopied = 0;
    /** torch.save and safetensors outputs: the files written anew (the names are inside). */
    size_t filesWritten = 0;
    /** The diff as asked, of the source: what the failing load does. */
    std::shared_ptr<const DiffResult> before;
    /** The same diff of the output: what the failing load does with it now. */
    std::optional<DiffResult> after;
    /** The output's index, as written (a caller may show it without reading it again). */
    std::shared_ptr<const CheckpointIndex> index;
    /** Commands that check the output (diff, verify). */
    std::string diffCommand, verifyCommand;
    /** fix --for-torch: the release asked for, which torch reads the source's metadata and
     *  which reads the output's (read back from disk). */
    std::optional<TorchVersion> forTorch;
    TorchReadability sourceTorch, outputTorch;
    /** Written, read back from disk, and the load as asked now fills every parameter (and,
     *  with forTorch, that torch reads the output's metadata). */
    bool repaired() const
    {
        return written && (layout.empty() || (after && loadsEveryParameter(*after))) &&
               (!forTorch || outputTorch.reads(*forTorch));
    }
};

/** Name of the manifest a repaired checkpoint carries at its top (shardscope.fix/1). */
inline constexpr const char *kFixManifest = "shardscope-fix.json";

} // namespace shardscope
