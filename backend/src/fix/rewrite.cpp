// SPDX-License-Identifier: MIT
#include "fix/rewrite.h"

#include "fix/tensorarchive.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <unistd.h>

namespace shardscope::detail {

namespace {

uint64_t dataBytes(const TensorEntry &t)
{
    return uint64_t(t.numel()) * uint64_t(elementSize(t.dtype));
}

Status writeAll(int fd, std::span<const std::byte> bytes, const std::string &path)
{
    for (size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return makeError(Error::Code::Io,
                             std::string("cannot write: ") + std::strerror(n < 0 ? errno : EIO))
                .inFile(path);
        done += size_t(n);
    }
    return Ok{};
}

Status writeAll(int fd, std::string_view s, const std::string &path)
{
    return writeAll(fd, std::as_bytes(std::span(s.data(), s.size())), path);
}

} // namespace

// The key's bytes: each piece read from its stored tensor, cast where stored otherwise, and
// copied to its rows along `dim` (a piece's leading stacked axes are its entry, size 1).
Result<std::vector<std::byte>> assembleRewrite(const CheckpointIndex &fixed, const TensorEntry &t,
                                               const Rewrite &r)
{
    const size_t es = size_t(elementSize(t.dtype)), nd = t.ndim();
    std::vector<std::byte> out(dataBytes(t));
    uint64_t outer = 1, inner = es;
    for (size_t d = 0; d < nd; ++d)
        (d < r.dim ? outer : inner) *= d == r.dim ? 1 : uint64_t(t.shape[d]);
    const int64_t rows = nd == 0 ? 1 : t.shape[r.dim];
    for (const RewritePiece &p : r.pieces) {
        auto read = readTensor(fixed, p.stored, p.box);
        if (!read)
            return read.error();
        TensorData data = std::move(*read);
        if (data.dtype != t.dtype) {
            auto cast = castTensor(data, t.dtype);
            if (!cast)
                return cast.error().atKey(p.stored.key.str());
            data = std::move(*cast);
        }
        const int64_t pieceRows = nd == 0 ? 1 : p.box.sizes[p.box.sizes.size() - nd + r.dim];
        const uint64_t run = uint64_t(pieceRows) * inner;
        if (data.bytes.size() != outer * run || p.at + pieceRows > rows)
            return makeError(Error::Code::Format, "the stored rows do not fit " + t.key)
                .atKey(p.stored.key.str());
        for (uint64_t o = 0; o < outer; ++o)
            std::memcpy(out.data() + (o * uint64_t(rows) + uint64_t(p.at)) * inner,
                        data.bytes.data() + o * run, run);
    }
    return out;
}

std::string placeRewrites(CheckpointIndex &fixed, const FixPlan &plan)
{
    const std::set<std::string> taken(fixed.files.begin(), fixed.files.end());
    // Nor a file the metadata does not name: the tree is mirrored whole.
    const auto free = [&](const std::string &n) {
        std::error_code ec;
        return !taken.count(n) &&
               !std::filesystem::exists(std::filesystem::path(fixed.dataDir) / n, ec);
    };
    std::string name = "shardscope_rewritten.distcp";
    for (int i = 1; !free(name); ++i)
        name = "shardscope_rewritten_" + std::to_string(i) + ".distcp";
    const uint32_t file = uint32_t(fixed.files.size());
    fixed.files.push_back(name);
    uint64_t offset = 0;
    for (const Rewrite &r : plan.rewrites) {
        TensorEntry &t = fixed.tensors[plan.firstNew + r.tensor];
        Location &loc = t.chunks.edit().front();
        loc.file = file;
        loc.transforms = 0;
        loc.encoding = Encoding::TorchSaveArchive;
        loc.offset = offset;
        loc.length = tensorArchive(t.dtype, t.shape, 0).size(dataBytes(t));
        offset += loc.length;
    }
    fixed.fileSizes.push_back(offset);
    if (!fixed.fileKinds.empty())
        fixed.fileKinds.emplace_back();
    return name;
}

Status writeRewrites(const CheckpointIndex &fixed, const FixPlan &plan, int fd,
                     const std::string &path,
                     const std::function<bool(uint64_t, uint64_t)> &progress)
{
    uint64_t total = 0, done = 0;
    for (const Rewrite &r : plan.rewrites)
        total += dataBytes(fixed.tensors[plan.firstNew + r.tensor]);
    for (const Rewrite &r : plan.rewrites) {
        const TensorEntry &t = fixed.tensors[plan.firstNew + r.tensor];
        auto bytes = assembleRewrite(fixed, t, r);
        if (!bytes)
            return bytes.error();
        const TensorArchive a = tensorArchive(t.dtype, t.shape, crc32(*bytes));
        if (a.size(bytes->size()) != t.chunks.front().length)
            return makeError(Error::Code::Format,
                             "the archive of " + t.key + " is not the size its metadata gives")
                .inFile(path);
        Status st = writeAll(fd, a.head, path);
        if (st)
            st = writeAll(fd, *bytes, path);
        if (st)
            st = writeAll(fd, a.tail, path);
        if (!st)
            return st;
        done += bytes->size();
        if (progress && !progress(done, total))
            return makeError(Error::Code::Cancelled, "cancelled");
    }
    return Ok{};
}

} // namespace shardscope::detail
