// SPDX-License-Identifier: MIT
#pragma once

#include "read/hotvector.h"
#include "shardscope/checkpoint.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace shardscope::detail {

/**
 * Where the persistent index lives and how big it may grow, from the environment:
 * SHARDSCOPE_NO_CACHE=1 (the CLI's --no-cache) turns it off;
 * SHARDSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/shardscope/index, else ~/.cache/shardscope/index;
 * SHARDSCOPE_CACHE_MAX_MB (default 4096), least recently used entries evicted past it;
 * SHARDSCOPE_CACHE_MIN_BYTES (default 1 MiB: smaller metadata decodes faster than a cache
 * file is checked); SHARDSCOPE_CACHE_SETTLE_SECONDS (default 2, see readDcpCached).
 */
struct IndexCacheSettings
{
    std::string dir; ///< empty: no cache
    uint64_t maxBytes = 0;
    uint64_t minBytes = 0;
    int64_t settleSeconds = 2;
    static IndexCacheSettings fromEnvironment();
};

/**
 * readDcp through the persistent index. A valid entry for the unchanged metadata files is
 * built into `index` instead of decoding them; otherwise readDcp decodes them and the result is
 * stored. The entry is keyed on each metadata file's device, inode, size, modification and
 * change times and a sample of its bytes; files changed less than `settleSeconds` before the
 * decode began are not stored, because a write within the same clock tick would leave their
 * times as they were. A new entry is written on a thread of its own after the call returns
 * (the process waits for it at exit; waitForIndexWrites() waits now). Sets
 * index.info["index_cache"] to what happened ("read from", "writing to", or why not); never
 * fails where readDcp would not.
 */
Status readDcpCached(const std::string &dir, CheckpointIndex &index, int threads,
                     const std::function<void(const CheckpointIndex &)> &onKeysKnown,
                     const IndexCacheSettings &settings = IndexCacheSettings::fromEnvironment());

class MappedFile;

/** An entry file mapped: the mapping an earlier openIndexEntry() of the same file (device,
 *  inode, size) kept, if any; null when it cannot be opened. */
std::shared_ptr<const MappedFile> mapIndexFile(const std::string &path);

/**
 * `entry`, the bytes of an entry that `file` holds (a whole entry file, or the one a remote
 * client kept behind the header it came with), decoded into `index` as an open from the
 * persistent index decodes it: checked whole (checksum, every record), then the tensors view the
 * mapping where the file is on a local file system and the entry 8-byte aligned in it, and the
 * mapping is kept for the life of the process; else copied (decodeIndexBody).
 */
Status openIndexEntry(const std::shared_ptr<const MappedFile> &file, std::span<const uint8_t> entry,
                      const std::string &path, CheckpointIndex &index, int threads = 0);

/** The persistent index's entry for a DCP directory's metadata as it is now (its key matches:
 *  only its header and key were read, not its body), mapped. */
struct CurrentIndexEntry
{
    std::string path;
    std::shared_ptr<const MappedFile> file;
    std::span<const uint8_t> bytes;
};
std::optional<CurrentIndexEntry> currentIndexEntry(const std::string &dir);

/**
 * The remote wire's form of an entry (a zstd frame of its bytes, remote/wire.h), kept beside it
 * as ENTRY.zst so that a server sends it as it is instead of compressing 200 MiB on every open:
 *
 *   "SSIDXZ1\n", u64 entry bytes, u64 the entry's checksum (its header's), u64 XXH3-64 of the
 *   frame, then the frame
 *
 * It is used only for the entry whose size and checksum it names, and only when its frame's
 * hash holds; it goes with its entry (evicted, replaced) and counts towards the cache's size.
 */
struct CompressedEntry
{
    std::shared_ptr<const void> keep; ///< the mapping `frame` lies in
    std::string_view frame;
};
/** The compressed form kept beside the entry file `entryPath`, when it is the form of
 *  `entry` (that file's bytes); else why not ("none kept", "for an earlier entry", …). */
Result<CompressedEntry> keptCompressedEntry(const std::string &entryPath,
                                            std::span<const uint8_t> entry);
/** Keeps `frame`, the compressed form of `entry` (the bytes of the entry file `entryPath`),
 *  beside it: written after that entry (the order writes were submitted), atomically. */
void keepCompressedEntry(const std::string &entryPath, std::span<const uint8_t> entry,
                         std::string frame);

/** Returns when every entry this process began writing is written (or failed to be). */
void waitForIndexWrites();

/** The bytes of the entry this process is still writing to `path` (an open said "writing to
 *  PATH"), without waiting for the write; null when none is pending. */
std::shared_ptr<const HotVector<char>> pendingIndexWrite(const std::string &path);

} // namespace shardscope::detail
