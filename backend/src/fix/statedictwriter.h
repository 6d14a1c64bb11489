// SPDX-License-Identifier: MIT
// A repaired torch.save file or safetensors set. Their names live inside the files, so the files
// are written anew: each tensor's bytes copied by the kernel (copy_file_range: a reflink where
// the filesystem shares extents) where they lie whole in a source file, assembled otherwise.
#pragma once

#include "fix/fixplan.h"
#include "shardscope/result.h"

#include <functional>
#include <string>

namespace shardscope::detail {

struct StateDictOutput
{
    std::string mainFile;      ///< what to open: the torch.save file, or the set's index/file
    uint64_t bytesWritten = 0; ///< tensor bytes written
    size_t filesWritten = 0;
};

/** Places a file carried over unchanged (a config.json beside a safetensors set). */
using PlaceFile = std::function<Status(const std::string &from, const std::string &to)>;

/**
 * Writes `fixed` (applyFix()'s torch.save or safetensors index, over its source's files) into
 * the directory `dir`: the same file names, the new names inside; a safetensors set's index
 * rewritten and the other files of its directory placed by `place`.
 */
Result<StateDictOutput> writeStateDict(const CheckpointIndex &fixed, const FixPlan &plan,
                                       const std::string &dir, const PlaceFile &place);

/** Whether `fix` can write this format as a state dict (torch.save, safetensors). */
bool stateDictFormat(Format f);

/** One of Megatron's legacy rank files as stored, read by the caller (fix/ opens no
 *  checkpoint itself): its pickle and its other records. */
struct LegacyArchive
{
    std::string file;   ///< as CheckpointIndex::files names it: mp_rank_00/model_optim_rng.pt
    std::string prefix; ///< the archive's folder
    std::string pickle; ///< its data.pkl
    struct Record
    {
        std::string name; ///< without the folder: "data/0", "version", …
        uint64_t offset = 0, size = 0;
    };
    std::vector<Record> records; ///< every record but data.pkl, data offsets in the file
};

/**
 * The rank files (CheckpointIndex::files' names) whose `model` entry a fix of Megatron's legacy
 * format changes: those of the rank directories the load was checked for (tensor-parallel
 * rank 0 of each stage and expert rank) that the plan adds keys to or drops keys from, and
 * their other tensor-parallel ranks' below `tp`, which hold the same names.
 */
std::vector<std::string> legacyFilesChanged(const CheckpointIndex &source, const FixPlan &plan,
                                            int tp);

/**
 * Writes each of `archives` (legacyFilesChanged()'s files, read from the source) anew under
 * `dataOut`: every record as stored, and the pickle as stored with one assignment appended,
 * `state_dict['model'] = {…}`, the repaired names over the same tensor objects (fetched from
 * the pickle's memo: nothing else in the file changes, args, optimizer and RNG states
 * included); a key copied from pieces gets a storage record of its own. `fixed` is applyFix()'s
 * index; a tensor-parallel rank's file takes rank 0's names over its own tensors.
 */
Result<StateDictOutput> writeLegacyFiles(const CheckpointIndex &fixed, const FixPlan &plan,
                                         const std::vector<LegacyArchive> &archives,
                                         const std::string &dataOut);

} // namespace shardscope::detail
