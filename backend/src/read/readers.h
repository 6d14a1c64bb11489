// SPDX-License-Identifier: MIT
#pragma once

#include "read/hotvector.h"
#include "shardscope/checkpoint.h"

#include <string>

// Format readers. Each fills a CheckpointIndex; paths in index.files are relative to dataDir.
namespace shardscope::detail {

inline constexpr uint32_t kUnassigned = UINT32_MAX;

uint32_t internFile(CheckpointIndex &index, const std::string &relativePath);
uint16_t internTransforms(CheckpointIndex &index, std::vector<std::string> chain);

/** A DCP directory's metadata files: `.metadata`, or rank-local `__<rank>.metadata` ones. */
std::vector<std::string> listDcpMetadata(const std::string &dir);
/** A DCP directory: `.metadata`, or rank-local `__<rank>.metadata` files. */
/**
 * `streamItems`: index the metadata on a second thread while the decoder runs (see DcpStream).
 * Off only in tests, which check that both ways give the same index. `onKeysKnown`: see
 * OpenOptions (streamed, single .metadata only). `spare`, when given, receives the decoder's
 * memo, emptied: for a big file, hundreds of megabytes the kernel has already mapped, which
 * the caller can fill again (the index cache writes its entry there) instead of fresh pages.
 */
Status readDcp(const std::string &dir, CheckpointIndex &index, bool streamItems = true,
               const std::function<void(const CheckpointIndex &)> &onKeysKnown = {},
               HotVector<char> *spare = nullptr);
/** A torch.save zip archive; keys get `keyPrefix` in front. */
Status readTorchSave(const std::string &dataDir, const std::string &relativePath,
                     const std::string &keyPrefix, CheckpointIndex &index);
Status readSafetensors(const std::string &dataDir, const std::string &relativePath,
                       CheckpointIndex &index);
Status readSafetensorsIndex(const std::string &jsonPath, CheckpointIndex &index);

/** A chunk of no elements: torch's load never reads its item (its box meets nothing). */
inline bool isEmptyChunk(const TensorEntry &t, size_t chunk)
{
    for (int64_t s : t.chunkSizes(chunk))
        if (s == 0)
            return true;
    return false;
}

/**
 * A data file's first and last stored item by offset, among those the item check can read
 * (a torch.save archive or object bytes, inside the file, of a chunk with elements), and how
 * many there are. Entries number tensors, then objects (CheckpointIndex::itemKey).
 */
struct FileEnds
{
    uint64_t firstOffset = UINT64_MAX, lastOffset = 0, items = 0;
    uint32_t firstEntry = 0, firstChunk = 0, lastEntry = 0, lastChunk = 0;
    void take(uint32_t entry, uint32_t chunk, uint64_t offset)
    {
        if (items == 0 || offset < firstOffset)
            firstOffset = offset, firstEntry = entry, firstChunk = chunk;
        if (items == 0 || offset > lastOffset)
            lastOffset = offset, lastEntry = entry, lastChunk = chunk;
        ++items;
    }
    void merge(const FileEnds &o)
    {
        if (!o.items)
            return;
        const uint64_t n = items + o.items;
        take(o.firstEntry, o.firstChunk, o.firstOffset);
        take(o.lastEntry, o.lastChunk, o.lastOffset);
        items = n;
    }
};

/** checkIntegrity(), and each data file's ends (per index.files) as its pass finds them. */
std::vector<Problem> checkIntegrity(const CheckpointIndex &index, std::vector<FileEnds> *ends);
/** checkItems(), sampling a big checkpoint with the ends checkIntegrity() found. */
std::vector<Problem> checkItems(const CheckpointIndex &index, bool every, std::string *summary,
                                const std::vector<FileEnds> *ends);

/** The key of a safetensors block's __metadata__ where torch's DCP writers keep each tensor's
 *  offsets in the global tensor (torch.distributed.checkpoint._hf_utils). */
inline constexpr const char *kDcpShardingInfo = "DCP_SHARDING_INFO";
/**
 * A DCP saved with FileSystemWriter(serialization_format=SAFETENSORS): each data file's tensors
 * are one safetensors block, and the metadata gives every tensor the block's offset. Points each
 * such chunk at its bytes in the block (RawStorage, row-major); a plain DCP is left untouched.
 */
void resolveSafetensorsItems(CheckpointIndex &index);
/** A safetensors file whose __metadata__ has DCP_SHARDING_INFO (a HuggingFaceStorageWriter
 *  shard). */
bool hasDcpShardingInfo(const std::string &path);
/** `names` (safetensors files in `dir`) read as torch's HuggingFaceStorageReader reads them. */
Status readHfStorage(const std::string &dir, std::vector<std::string> names,
                     CheckpointIndex &index);

/** Records file sizes (UINT64_MAX when missing) for every interned file. */
void statFiles(CheckpointIndex &index);
/** A DCP checkpoint's flavour from its keys: fsdp_dtensor (model.module. and optimizer keys) or
 *  plain DCP. Run on every open, and on a repaired index (its keys decide what reopens it). */
void refineDcpFormat(CheckpointIndex &index);

} // namespace shardscope::detail
