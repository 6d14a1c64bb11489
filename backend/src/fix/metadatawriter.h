// SPDX-License-Identifier: MIT
// A DCP `.metadata` written from an index: the classes torch's FileSystemReader.read_metadata()
// unpickles (docs/formats.md §2.2), with each key's chunks pointing at the stored items the index
// names. Nothing of the source pickle is copied: every byte is written from the index's values.
#pragma once

#include "shardscope/checkpoint.h"

#include <string>

namespace shardscope::detail {

/**
 * The pickle of a `torch.distributed.checkpoint.metadata.Metadata` for every tensor and BYTE_IO
 * object of `index` (objects without a stored location are left out), with `planner_data` from
 * each key's nesting, `storage_data` from its locations (relative to index.dataDir, transform
 * chains as `transform_descriptors`) and `version` "1.0.0".
 */
std::string dcpMetadataPickle(const CheckpointIndex &index);

/**
 * The same pickle written to `fd` as it is made: pieces go to a writing thread, so that making
 * the next one overlaps the kernel's copy of the last (half a gigabyte at DeepSeek-V3 scale).
 * Returns the bytes written, or the write's error naming `path`.
 */
Result<uint64_t> writeDcpMetadata(const CheckpointIndex &index, int fd, const std::string &path,
                                  size_t pieceBytes = size_t(16) << 20);

} // namespace shardscope::detail
