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

} // namespace shardscope::detail
