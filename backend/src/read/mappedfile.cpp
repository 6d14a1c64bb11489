// SPDX-License-Identifier: MIT
#include "read/mappedfile.h"
#include "common/regularfile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

namespace shardscope::detail {

namespace {

// Network and user-space file systems, whose pages may not come back (statfs(2) magic numbers).
bool onLocalFilesystem(int fd)
{
    struct statfs fs
    {
    };
    if (::fstatfs(fd, &fs) != 0)
        return false;
    switch (static_cast<uint64_t>(fs.f_type)) {
    case 0x6969:     // NFS
    case 0x517B:     // SMB
    case 0xFF534D42: // CIFS
    case 0xFE534D42: // SMB2
    case 0x65735546: // FUSE
    case 0x01021997: // 9P
    case 0x00C36400: // Ceph
    case 0x5346414F: // AFS
    case 0x0BD00BD0: // Lustre
    case 0x47504653: // GPFS
    case 0x013111A8: // IBRIX
    case 0x73757245: // Coda
        return false;
    default:
        return true;
    }
}

} // namespace

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string &path, bool populate,
                                                           bool forCopies)
{
    auto opened = openRegularFile(path);
    if (!opened)
        return opened.error();
    const int fd = *opened;
    struct stat st
    {
    };
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return makeError(Error::Code::Io, std::strerror(err)).inFile(path);
    }
    std::shared_ptr<MappedFile> f(new MappedFile);
    f->m_path = path;
    f->m_size = uint64_t(st.st_size);
    f->m_device = uint64_t(st.st_dev);
    f->m_inode = uint64_t(st.st_ino);
    f->m_local = onLocalFilesystem(fd);
    if (f->m_size > 0) {
        void *p = ::mmap(nullptr, f->m_size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0),
                         fd, 0);
        if (p == MAP_FAILED) {
            ::close(fd);
            return makeError(Error::Code::Io, std::string("mmap: ") + std::strerror(errno))
                .inFile(path);
        }
        f->m_data = static_cast<const uint8_t *>(p);
    }
    if (forCopies)
        f->m_fd = fd;
    else
        ::close(fd);
    return std::shared_ptr<const MappedFile>(std::move(f));
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<uint8_t *>(m_data), m_size);
    if (m_fd >= 0)
        ::close(m_fd);
}

Status MappedFile::copyOut(std::span<const uint8_t> from, void *to) const
{
    if (from.empty()) // an empty tensor's data pointer need not point into the mapping
        return Ok{};
    if (m_fd < 0)
        return makeError(Error::Code::Internal, "file not opened for copies").inFile(m_path);
    if (from.data() < m_data || from.data() + from.size() > m_data + m_size)
        return makeError(Error::Code::Internal, "copy from outside the mapping").inFile(m_path);
    uint64_t offset = uint64_t(from.data() - m_data);
    auto *out = static_cast<uint8_t *>(to);
    for (size_t left = from.size(); left > 0;) {
        const ssize_t got = ::pread(m_fd, out, left, off_t(offset));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) // the file shrank under us, or the disk failed
            return makeError(Error::Code::Io, got < 0 ? std::strerror(errno) : "file ends early")
                .inFile(m_path)
                .atOffset(offset);
        out += got;
        offset += uint64_t(got);
        left -= size_t(got);
    }
    return Ok{};
}

Result<std::span<const uint8_t>> MappedFile::range(uint64_t offset, uint64_t length) const
{
    if (offset > m_size || length > m_size - offset) {
        return makeError(Error::Code::Format, "byte range [" + std::to_string(offset) + ", +" +
                                                  std::to_string(length) +
                                                  ") runs past the end of the file (" +
                                                  std::to_string(m_size) + " bytes)")
            .inFile(m_path)
            .atOffset(offset);
    }
    // A data file kept open for copies may have been cut since it was mapped (a job rewriting
    // the checkpoint): touching the mapping past its new end would raise SIGBUS. Its size now
    // decides, so that the read fails with this file and key instead.
    if (m_fd >= 0) {
        struct stat st
        {
        };
        if (::fstat(m_fd, &st) == 0 && uint64_t(st.st_size) < offset + length)
            return makeError(Error::Code::Io, "the file shrank to " + std::to_string(st.st_size) +
                                                  " bytes since it was opened (byte range [" +
                                                  std::to_string(offset) + ", +" +
                                                  std::to_string(length) + ") is gone)")
                .inFile(m_path)
                .atOffset(offset);
    }
    return std::span<const uint8_t>(m_data + offset, length);
}

Result<std::string> readTextFile(const std::string &path, uint64_t maxBytes)
{
    return readRegularFile(path, maxBytes);
}

} // namespace shardscope::detail
