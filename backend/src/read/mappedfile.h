// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/result.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace shardscope::detail {

/** A read-only memory map of a whole file. Opened O_RDONLY: we never write a checkpoint. */
class MappedFile
{
public:
    /**
     * `populate`: fault every page in now (one kernel call) for files read front to back.
     * `forCopies`: keep the file open for copyOut(); otherwise it is closed once mapped, so that
     * a checkpoint's thousand rank-local metadata files held at once take no descriptors.
     */
    static Result<std::shared_ptr<const MappedFile>>
    open(const std::string &path, bool populate = false, bool forCopies = false);
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    const std::string &path() const { return m_path; }
    uint64_t size() const { return m_size; }
    /** The file that was mapped, as fstat() saw it. */
    uint64_t device() const { return m_device; }
    uint64_t inode() const { return m_inode; }
    /**
     * On a local file system. A page of a mapped file on a network one (NFS, SMB, FUSE, …) can
     * fail to come back after the kernel dropped it (the file removed by another host): SIGBUS.
     * Keep no views into such a mapping past the read that checked it.
     */
    bool local() const { return m_local; }
    std::span<const uint8_t> bytes() const { return {m_data, m_size}; }
    /** [offset, offset+length) or an Error naming the file when it runs past the end. */
    Result<std::span<const uint8_t>> range(uint64_t offset, uint64_t length) const;
    /**
     * Copies the mapped bytes `from` (a span of bytes()) into `to` with pread(): the kernel
     * copies from its page cache, where touching the mapping would fault every page in first.
     * Only for a file opened `forCopies`.
     */
    Status copyOut(std::span<const uint8_t> from, void *to) const;

private:
    MappedFile() = default;
    std::string m_path;
    const uint8_t *m_data = nullptr;
    uint64_t m_size = 0;
    uint64_t m_device = 0, m_inode = 0;
    bool m_local = true;
    int m_fd = -1;
};

/** Reads a whole (small) file into a string. */
Result<std::string> readTextFile(const std::string &path, uint64_t maxBytes = 1 << 20);

} // namespace shardscope::detail
