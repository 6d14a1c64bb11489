// SPDX-License-Identifier: MIT
#pragma once

#include "read/mappedfile.h"
#include "shardscope/checkpoint.h"

#include <unordered_map>
#include <vector>

namespace shardscope::detail {

/** The bytes of one stored item, after undoing its transforms. */
struct LoadedItem
{
    std::shared_ptr<const MappedFile> file;
    std::vector<uint8_t> owned; ///< set when a transform produced new bytes
    std::span<const uint8_t> bytes;
    uint64_t base = 0; ///< file offset of bytes[0] (0 for transformed bytes)
    std::string path;
};

/** Open files, mapped once per operation. */
class FileCache
{
public:
    explicit FileCache(const CheckpointIndex &index)
        : m_index(index)
    {}
    Result<std::shared_ptr<const MappedFile>> get(uint32_t file);

private:
    const CheckpointIndex &m_index;
    std::unordered_map<uint32_t, std::shared_ptr<const MappedFile>> m_files;
};

/** Objects (BYTE_IO items) have no size in the metadata: their transformed bytes stop here. */
inline constexpr uint64_t kMaxObjectInflated = uint64_t(1) << 30;

/** Reads one item; `maxBytes` bounds what its transforms may produce (a compression bomb). */
Result<LoadedItem> loadItem(const CheckpointIndex &index, const Location &loc, FileCache &files,
                            uint64_t maxBytes);

/** Undoes a DCP stream transform chain (zstd), producing at most `maxBytes`. */
Result<std::vector<uint8_t>> undoTransforms(std::span<const uint8_t> in,
                                            const std::vector<std::string> &chain,
                                            uint64_t maxBytes);

} // namespace shardscope::detail
