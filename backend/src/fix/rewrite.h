// SPDX-License-Identifier: MIT
// The keys chunk references cannot express (an entry of a stacked item, rows cut across a stored
// chunk, sections stored in other dtypes), copied into one new data file of torch.save archives,
// one archive a key, as DCP's FileSystemWriter would have stored them.
#pragma once

#include "fix/fixplan.h"
#include "shardscope/result.h"

#include <functional>
#include <string>

namespace shardscope::detail {

/** A rewritten key's bytes (contiguous, little-endian): each piece read from its stored tensor,
 *  cast where stored otherwise, and placed at its rows. */
Result<std::vector<std::byte>> assembleRewrite(const CheckpointIndex &fixed, const TensorEntry &t,
                                               const Rewrite &r);

/**
 * Gives every rewritten key of `fixed` (applyFix()'s output) its chunk in a new data file, named
 * after no file of the checkpoint and appended to fixed.files. Returns the file's name.
 */
std::string placeRewrites(CheckpointIndex &fixed, const FixPlan &plan);

/**
 * Writes that file to `fd`: each key assembled from its stored pieces (read through `fixed`,
 * which still names the source's files), cast to the key's dtype where its pieces' differ.
 * `progress(done, total)` in bytes; false cancels.
 */
Status writeRewrites(const CheckpointIndex &fixed, const FixPlan &plan, int fd,
                     const std::string &path,
                     const std::function<bool(uint64_t, uint64_t)> &progress);

} // namespace shardscope::detail
