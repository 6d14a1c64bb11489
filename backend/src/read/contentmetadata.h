// SPDX-License-Identifier: MIT
// What a torch_dist checkpoint says of the sharded state dict it was saved from: megatron-core's
// `content_metadata`, which a resume passes back to sharded_state_dict (docs/formats.md §5.3.1).
#pragma once

#include "shardscope/checkpoint.h"

namespace shardscope::detail {

/**
 * Copies the content metadata's plain entries into index.info as
 * "megatron.content_metadata.<name>" (Python's spelling: "True", "'fully_reshardable'"), from
 * common.pt's objects or from the `common_state` object newer saves keep inside the DCP
 * checkpoint. Nothing when there is none; a common_state that cannot be read is noted as such.
 */
void noteContentMetadata(CheckpointIndex &index);

} // namespace shardscope::detail
