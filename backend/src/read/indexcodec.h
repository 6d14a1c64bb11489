// SPDX-License-Identifier: MIT
#pragma once

#include "read/hotvector.h"
#include "shardscope/checkpoint.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardscope::detail {

/*
 * The persistent index's file format: what readDcp made of a checkpoint's metadata, in a form
 * that is built back into a CheckpointIndex on every core without decoding a pickle.
 *
 *   header  "SSINDEX\n", u32 schema, u32 0, u64 key bytes, u64 body bytes, u64 XXH3-64 of both
 *   key     what the index was decoded from (IndexCacheKey)
 *   body    the index: small fields, objects, then the tensors as fixed-size records over
 *           pools of NUL-terminated key bytes, int64 dims and raw Locations (each pool 8-byte
 *           aligned, so that a mapped file's entries can view them)
 *
 * A cache file is untrusted input like any checkpoint: every count, offset and index is checked
 * against the file before it is used, and the checksum is checked before the body is read.
 */

/** One metadata file as stat() and a sample of its bytes saw it when it was decoded. */
struct FileSignature
{
    std::string name; ///< relative to the checkpoint directory
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtimeNs = 0, ctimeNs = 0;
    uint64_t sampleHash = 0; ///< XXH3 of its first and last 64 KiB and 16 blocks between
    bool operator==(const FileSignature &) const = default;
};

struct IndexCacheKey
{
    std::string build;     ///< ShardScope's version and the format's schema
    std::string directory; ///< the directory as opened: problems name files under it
    std::vector<FileSignature> files;
    bool operator==(const IndexCacheKey &) const = default;
};

/** Raised whenever what the DCP reader produces changes, so older entries are decoded anew. */
inline constexpr uint32_t kIndexCacheSchema = 3;

/** The index and those of its info entries named in `infoKeys`, as a cache file's bytes. */
std::string encodeIndex(const IndexCacheKey &key, const CheckpointIndex &index,
                        const std::vector<std::string> &infoKeys);
/** The same bytes, written into `scratch`'s memory (see readDcp's `spare`). */
HotVector<char> encodeIndex(const IndexCacheKey &key, const CheckpointIndex &index,
                            const std::vector<std::string> &infoKeys, HotVector<char> scratch);

/** The checksum a cache file's header must hold for the rest of `bytes` (a whole file): for
 *  the fuzzer, which must get past it to reach the body's decoder. 0 when there is no header. */
uint64_t indexChecksum(std::span<const uint8_t> bytes);

/** The checksum a cache file's header holds (what names an entry's contents), 0 when `bytes`
 *  hold no header. */
uint64_t storedIndexChecksum(std::span<const uint8_t> bytes);

/** The header and key of a cache file; errors name `path` and the offset. Not checksummed:
 *  only compared, and the body is checked before it is used. */
Result<IndexCacheKey> decodeIndexKey(std::span<const uint8_t> bytes, const std::string &path);

/** How many of each the entry holds: a caller that shows an index read from it can tell whether
 *  the open added anything after (common.pt's keys, integrity problems). */
struct IndexEntryCounts
{
    uint64_t files = 0, transformChains = 0, problems = 0, tensors = 0, objects = 0;
    bool operator==(const IndexEntryCounts &) const = default;
};
Result<IndexEntryCounts> indexEntryCounts(std::span<const uint8_t> bytes, const std::string &path);

/**
 * The body into `index` (files, transform chains, tensors, objects, problems and info
 * entries; the info it had before stays), on `threads` threads (0: every core); the same index for
 * any count. `view`: `bytes` stay mapped for the life of the process, so the tensors' keys,
 * shapes, chunks and chunk dims view them instead of copying (shardscope/compact.h). On an error
 * `index` is left in an unspecified state.
 */
Status decodeIndexBody(std::span<const uint8_t> bytes, const std::string &path,
                       CheckpointIndex &index, int threads = 0, bool view = false);

} // namespace shardscope::detail
