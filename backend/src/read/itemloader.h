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

Result<LoadedItem> loadItem(const CheckpointIndex &index, const Location &loc, FileCache &files);

/** Undoes a DCP stream transform chain (zstd). */
Result<std::vector<uint8_t>> undoTransforms(std::span<const uint8_t> in,
                                            const std::vector<std::string> &chain);

} // namespace shardscope::detail
