// SPDX-License-Identifier: MIT
#include "fix/fixoutput.h"

#include "common/regularfile.h"
#include "fix/metadatawriter.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

Error ioError(const std::string &path, const std::string &what, int err)
{
    return makeError(Error::Code::Io, what + ": " + std::strerror(err)).inFile(path);
}

// Across filesystems (copy_file_range before Linux 5.3 and since 5.19), or on a filesystem
// without it: through memory, from where the descriptors stand.
Status copyThroughMemory(int in, int out, const std::string &from, const std::string &to)
{
    std::vector<char> buf(size_t(1) << 24);
    for (;;) {
        const ssize_t r = ::read(in, buf.data(), buf.size());
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ioError(from, "cannot read", errno);
        if (r == 0)
            return Ok{};
        for (ssize_t done = 0; done < r;) {
            const ssize_t w = ::write(out, buf.data() + done, size_t(r - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return ioError(to, "cannot write", w < 0 ? errno : EIO);
            done += w;
        }
    }
}

// A byte-for-byte copy through the kernel (copy_file_range: a reflink where the filesystem
// shares extents), the source opened as every checkpoint file is.
Status copyFile(const std::string &from, const std::string &to)
{
    auto in = openRegularFile(from);
    if (!in)
        return in.error();
    const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        const int err = errno;
        ::close(*in);
        return ioError(to, "cannot create", err);
    }
    Status st = Ok{};
    for (;;) {
        const ssize_t n = ::copy_file_range(*in, nullptr, out, nullptr, size_t(1) << 30, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 &&
            (errno == EXDEV || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)) {
            st = copyThroughMemory(*in, out, from, to);
            break;
        }
        if (n < 0) {
            st = ioError(to, "cannot copy " + from, errno);
            break;
        }
        if (n == 0)
            break;
    }
    ::close(*in);
    if (::close(out) != 0 && st)
        st = ioError(to, "cannot write", errno);
    return st;
}

Status writeMetadata(const CheckpointIndex &fixed, const std::string &path, FixResult &result)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ioError(path, "cannot create", errno);
    auto written = writeDcpMetadata(fixed, fd, path);
    if (::close(fd) != 0 && written)
        return ioError(path, "cannot write", errno);
    if (!written)
        return written.error();
    result.metadataBytes = *written;
    return Ok{};
}

Status writeNew(const std::string &path, std::string_view content)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return ioError(path, "cannot create", errno);
    for (size_t done = 0; done < content.size();) {
        const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            ::close(fd);
            return ioError(path, "cannot write", err);
        }
        done += size_t(n);
    }
    if (::close(fd) != 0)
        return ioError(path, "cannot write", errno);
    return Ok{};
}

bool isRankLocalMetadata(const std::string &name)
{
    return name.starts_with("__") && name.ends_with(".metadata");
}

class TreeWriter
{
public:
    TreeWriter(const CheckpointIndex &fixed, const FixOutputOptions &options, FixResult &result)
        : m_fixed(fixed)
        , m_options(options)
        , m_result(result)
    {}

    Status write()
    {
        const fs::path out = fs::path(m_options.output).lexically_normal();
        const fs::path top = fs::path(checkpointTop(m_fixed));
        const fs::path data = fs::path(m_fixed.dataDir);
        std::error_code ec;
        const fs::path topAbs = fs::weakly_canonical(top, ec);
        const fs::path outAbs = fs::weakly_canonical(fs::absolute(out, ec), ec);
        m_top = top;
        // What a file's real path must lie under to be the checkpoint's own: its directory
        // (a one-file checkpoint's) or tree.
        m_topReal = fs::is_directory(topAbs, ec) ? topAbs : topAbs.parent_path();
        // The output must not lie inside the source (it would be mirrored into itself) nor hold it.
        const auto inside = [](const fs::path &a, const fs::path &b) {
            auto r = a.lexically_relative(b);
            return !r.empty() && *r.begin() != "..";
        };
        if (inside(outAbs, topAbs) || inside(topAbs, outAbs))
            return makeError(Error::Code::Unsupported,
                             "the output must be outside the checkpoint " + top.string())
                .inFile(out.string());
        if (fs::symlink_status(out, ec).type() != fs::file_type::not_found) {
            if (!m_options.force)
                return makeError(Error::Code::Unsupported,
                                 "exists; give a new directory (or --force to replace a "
                                 "checkpoint an earlier fix wrote)")
                    .inFile(out.string());
            if (!fs::is_directory(fs::symlink_status(out, ec)) ||
                !fs::is_regular_file(out / kFixManifest, ec))
                return makeError(Error::Code::Unsupported,
                                 std::string("exists and holds no ") + kFixManifest +
                                     ": --force replaces only what an earlier fix wrote")
                    .inFile(out.string());
        }
        const fs::path parent = outAbs.parent_path();
        m_temp = (parent /
                  ("." + outAbs.filename().string() + ".shardscope-" + std::to_string(::getpid())))
                     .string();
        fs::remove_all(m_temp, ec);
        if (::mkdir(m_temp.c_str(), 0755) != 0)
            return ioError(m_temp, "cannot create the output beside its destination", errno);
        Status st = Ok{};
        // Into the temporary tree, which is renamed into place whole: no file of it is seen
        // half-written. Not flushed to disk (half a gigabyte at DeepSeek-V3 scale would double
        // the fix's time); after a power loss, run the fix again with --force.
        if (m_options.writeFiles) {
            st = m_options.writeFiles(m_temp,
                                      [this](const std::string &from, const std::string &to) {
                                          return place(fs::path(from), fs::path(to));
                                      });
        } else {
            st = mirror(top, fs::path(m_temp), data);
            const fs::path dataOut = fs::path(m_temp) / data.lexically_relative(top);
            if (m_options.writeInto) {
                if (st)
                    st = m_options.writeInto(dataOut.string());
            } else if (st && m_options.writeData)
                st = writeDataFile((dataOut / m_options.dataFile).string());
            if (st && !m_options.writeInto)
                st = checkReferences();
            if (st && !m_options.writeInto)
                st = writeMetadata(m_fixed, (dataOut / ".metadata").string(), m_result);
        }
        if (st && m_options.check)
            st = m_options.check(m_temp);
        if (st)
            st = writeNew((fs::path(m_temp) / kFixManifest).string(), m_options.manifest());
        if (st)
            st = swapIn(outAbs);
        if (!st)
            fs::remove_all(m_temp, ec);
        return st;
    }

private:
    // Every directory and regular file under `from`, linked (or copied) to the same place under
    // `to`; the metadata the new one replaces is left out. Symlinks to directories are not
    // followed: the tree is the checkpoint's own.
    Status mirror(const fs::path &from, const fs::path &to, const fs::path &data)
    {
        std::error_code ec;
        for (auto it = fs::directory_iterator(from, ec); !ec && it != fs::directory_iterator();
             it.increment(ec)) {
            const fs::path src = it->path();
            const std::string name = src.filename().string();
            const fs::path dst = to / name;
            const fs::file_status link = it->symlink_status(ec);
            if (fs::is_directory(link)) {
                if (::mkdir(dst.c_str(), 0755) != 0)
                    return ioError(dst.string(), "cannot create", errno);
                if (Status st = mirror(src, dst, data); !st)
                    return st;
                continue;
            }
            if (from == data &&
                (name == ".metadata" || isRankLocalMetadata(name) || name == ".metadata.tmp"))
                continue;
            if (from == fs::path(checkpointTop(m_fixed)) && name == kFixManifest)
                continue;
            if (!m_options.replaced.empty() &&
                m_options.replaced.count(src.lexically_relative(data).string()))
                continue; // written anew
            struct stat st
            {
            };
            if (::stat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
                continue; // FIFOs, sockets, devices, dangling links: nothing of a checkpoint
            if (Status s = place(src, dst); !s)
                return s;
            if (from == data)
                m_placed.insert(name);
        }
        if (ec)
            return ioError(from.string(), "cannot list", ec.value());
        return Ok{};
    }

    Status place(const fs::path &src, const fs::path &dst)
    {
        std::error_code ec;
        const fs::path real = fs::canonical(src, ec);
        // A symlink to a file outside the checkpoint: its bytes are copied. A hard link would
        // make the output share that outside inode (whatever rewrites it changes the output),
        // a symlink would leave the output depending on it.
        const bool outside = !ec && !isInside(real, m_topReal);
        if (m_options.copy || outside) {
            if (Status st = copyFile(src.string(), dst.string()); !st)
                return st;
            ++m_result.filesCopied;
            if (outside && !m_options.copy)
                m_result.copiedFromOutside.push_back(src.lexically_relative(m_top).string() +
                                                     " -> " + real.string());
            return Ok{};
        }
        // The same inode: no byte copied. A symlink's target is linked, not the link.
        if (!ec && ::link(real.c_str(), dst.c_str()) == 0) {
            ++m_result.filesLinked;
            return Ok{};
        }
        // Another filesystem, or links refused: point at the source instead.
        const fs::path target = ec ? fs::absolute(src) : real;
        if (::symlink(target.c_str(), dst.c_str()) != 0)
            return ioError(dst.string(), "cannot link or symlink " + src.string(), errno);
        ++m_result.filesSymlinked;
        return Ok{};
    }

    Status writeDataFile(const std::string &path)
    {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            return ioError(path, "cannot create", errno);
        Status st = Ok{};
        try {
            st = m_options.writeData(fd, path);
        } catch (...) {
            ::close(fd);
            throw;
        }
        if (::close(fd) != 0 && st)
            st = ioError(path, "cannot write", errno);
        if (st)
            m_placed.insert(m_options.dataFile);
        return st;
    }

    // The new metadata may name only the files placed beside it: a path that leads elsewhere
    // (a lying `.metadata`) is refused, not followed.
    Status checkReferences()
    {
        std::set<uint32_t> used;
        for (const TensorEntry &t : m_fixed.tensors)
            for (const Location &l : t.chunks)
                used.insert(l.file);
        for (const ObjectEntry &o : m_fixed.objects)
            if (o.location)
                used.insert(o.location->file);
        for (uint32_t f : used) {
            if (f >= m_fixed.files.size() || !m_placed.count(m_fixed.files[f]))
                return makeError(
                           Error::Code::Unsupported,
                           "the metadata names data file '" +
                               (f < m_fixed.files.size() ? m_fixed.files[f] : std::string("?")) +
                               "', which is not a regular file of the checkpoint "
                               "directory; nothing is written for it")
                    .inFile((fs::path(m_fixed.dataDir) / ".metadata").string());
        }
        return Ok{};
    }

    // The finished tree takes the output's name; a replaced one (--force) goes only then.
    Status swapIn(const fs::path &out)
    {
        std::error_code ec;
        std::string old;
        if (fs::exists(fs::symlink_status(out, ec))) {
            old = m_temp + ".old";
            if (::rename(out.c_str(), old.c_str()) != 0)
                return ioError(out.string(), "cannot move the earlier output aside", errno);
        }
        if (::rename(m_temp.c_str(), out.c_str()) != 0) {
            const int err = errno;
            if (!old.empty())
                ::rename(old.c_str(), out.c_str());
            return ioError(out.string(), "cannot create", err);
        }
        if (!old.empty())
            fs::remove_all(old, ec);
        return Ok{};
    }

    static bool isInside(const fs::path &path, const fs::path &dir)
    {
        const fs::path r = path.lexically_relative(dir);
        return !r.empty() && *r.begin() != ".." && *r.begin() != ".";
    }

    const CheckpointIndex &m_fixed;
    const FixOutputOptions &m_options;
    FixResult &m_result;
    fs::path m_top, m_topReal;
    std::string m_temp;
    std::set<std::string> m_placed;
};

} // namespace

std::string checkpointTop(const CheckpointIndex &index)
{
    if (auto it = index.info.find("megatron_root"); it != index.info.end())
        return it->second;
    std::error_code ec;
    if ((index.format == Format::TorchSave || index.format == Format::Safetensors) &&
        fs::is_regular_file(index.inputPath, ec))
        return index.inputPath;
    return index.dataDir;
}

Status writeFixedCheckpoint(const CheckpointIndex &fixed, const FixOutputOptions &options,
                            FixResult &result)
{
    try {
        return TreeWriter(fixed, options, result).write();
    } catch (const std::exception &e) {
        return makeError(Error::Code::Io, e.what()).inFile(options.output);
    }
}

} // namespace shardscope::detail
