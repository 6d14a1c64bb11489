// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/diff.h"

namespace shardscope::detail {

/**
 * Whether the load is Megatron-FSDP's fsdp_dtensor load: that format, or a DCP directory of
 * Megatron-FSDP's names (`model.module.…`) that lacks the optimizer entries that identify the
 * format on their own (a Megatron-Bridge checkpoint saved without optimizer). Megatron itself
 * decides by --ckpt-format, not by the files.
 */
bool fsdpDtensorLoad(const CheckpointIndex &index);

/** What the diff knows of the checkpoint that decides the loader's words. */
struct LoadContext
{
    /** Stored model keys no request names (torch's "unexpected", Megatron's "missing"). */
    std::vector<std::string> unrequested;
    bool fsdpDtensorLoad = false; ///< fsdpDtensorLoad(index)
    /** What the load raises before any strictness applies (torch_dist's global shape check). */
    std::string raisesFirst;
    /** The entry of a torch.save whose value load_state_dict gets ("module." in DeepSpeed's
     *  model states): the request keys carry it, torch's words do not. */
    std::string stateDictEntry;
};

/**
 * What the load does: what its planning and Megatron's checks decide (neither looks at chunk
 * coverage: a key with holes is there, loads, and keeps its initial values in them), unless it
 * goes on to read a key whose data cannot be read, which raises.
 */
LoadOutcome loadOutcome(const DiffResult &r, const CheckpointIndex &index,
                        const DiffOptions &options, const LoadContext &context);

} // namespace shardscope::detail
