// SPDX-License-Identifier: MIT
#include "fix/rewrite.h"

#include "fix/tensorarchive.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
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

Status writeAt(int fd, std::string_view s, uint64_t at, const std::string &path)
{
    for (size_t done = 0; done < s.size();) {
        const ssize_t n = ::pwrite(fd, s.data() + done, s.size() - done, off_t(at + done));
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

} // namespace

namespace {

// The entries of a key's leading stacked axes (1 without any), and each piece's entry.
size_t entryCount(const TensorEntry &t, const Rewrite &r)
{
    size_t n = 1;
    for (size_t d = 0; d < r.lead && d < t.ndim(); ++d)
        n *= size_t(t.shape[d]);
    return n;
}

std::vector<std::vector<const RewritePiece *>> piecesByEntry(const TensorEntry &t, const Rewrite &r)
{
    std::vector<std::vector<const RewritePiece *>> out(entryCount(t, r));
    for (const RewritePiece &p : r.pieces) {
        size_t flat = 0;
        for (size_t d = 0; d < r.lead && d < t.ndim(); ++d)
            flat = flat * size_t(t.shape[d]) + size_t(d < p.lead.size() ? p.lead[d] : 0);
        if (flat < out.size())
            out[flat].push_back(&p);
    }
    return out;
}

// One entry of the key (the whole key without stacked axes): its pieces read from their
// stored tensors, cast where stored otherwise, and copied to their rows along `dim`.
Result<std::vector<std::byte>> assembleEntry(const CheckpointIndex &fixed, const TensorEntry &t,
                                             const Rewrite &r,
                                             const std::vector<const RewritePiece *> &pieces)
{
    const size_t es = size_t(elementSize(t.dtype));
    const size_t nd = t.ndim() - std::min(r.lead, t.ndim());
    const auto part = std::span<const int64_t>(t.shape.data() + (t.ndim() - nd), nd);
    uint64_t outer = 1, inner = es, elements = 1;
    for (size_t d = 0; d < nd; ++d) {
        elements *= uint64_t(part[d]);
        (d < r.dim ? outer : inner) *= d == r.dim ? 1 : uint64_t(part[d]);
    }
    std::vector<std::byte> out(elements * es);
    const int64_t rows = nd == 0 ? 1 : part[r.dim];
    for (const RewritePiece *p : pieces) {
        auto read = readTensor(fixed, p->stored, p->box);
        if (!read)
            return read.error();
        TensorData data = std::move(*read);
        if (data.dtype != t.dtype) {
            auto cast = castTensor(data, t.dtype);
            if (!cast)
                return cast.error().atKey(p->stored.key.str());
            data = std::move(*cast);
        }
        const int64_t pieceRows = nd == 0 ? 1 : p->box.sizes[p->box.sizes.size() - nd + r.dim];
        const uint64_t run = uint64_t(pieceRows) * inner;
        if (data.bytes.size() != outer * run || p->at + pieceRows > rows)
            return makeError(Error::Code::Format, "the stored rows do not fit " + t.key)
                .atKey(p->stored.key.str());
        for (uint64_t o = 0; o < outer; ++o)
            std::memcpy(out.data() + (o * uint64_t(rows) + uint64_t(p->at)) * inner,
                        data.bytes.data() + o * run, run);
    }
    return out;
}

} // namespace

// The key's bytes, entry after entry of its stacked axes.
Result<std::vector<std::byte>> assembleRewrite(const CheckpointIndex &fixed, const TensorEntry &t,
                                               const Rewrite &r)
{
    std::vector<std::byte> out;
    out.reserve(dataBytes(t));
    for (const auto &pieces : piecesByEntry(t, r)) {
        auto entry = assembleEntry(fixed, t, r, pieces);
        if (!entry)
            return entry.error();
        out.insert(out.end(), entry->begin(), entry->end());
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
    for (const ObjectWrite &w : plan.objectWrites) {
        ObjectEntry &o = fixed.objects[plan.firstNewObject + w.object];
        o.location = Location{file, 0, Encoding::TorchSaveArchive, offset, w.bytes.size()};
        offset += w.bytes.size();
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
        // The head holds the data's checksum, known at the end: written once sized, then again
        // in place. Entry after entry, so that memory holds one parameter, not a stacked key.
        const TensorArchive sized = tensorArchive(t.dtype, t.shape, 0);
        if (sized.size(dataBytes(t)) != t.chunks.front().length)
            return makeError(Error::Code::Format,
                             "the archive of " + t.key + " is not the size its metadata gives")
                .inFile(path);
        Status st = writeAll(fd, sized.head, path);
        uint32_t crc = 0;
        for (const auto &pieces : piecesByEntry(t, r)) {
            if (!st)
                break;
            auto bytes = assembleEntry(fixed, t, r, pieces);
            if (!bytes)
                return bytes.error();
            crc = crc32(*bytes, crc);
            st = writeAll(fd, *bytes, path);
            done += bytes->size();
            if (st && progress && !progress(done, total))
                return makeError(Error::Code::Cancelled, "cancelled");
        }
        const TensorArchive a = tensorArchive(t.dtype, t.shape, crc);
        if (st)
            st = writeAll(fd, a.tail, path);
        if (st && a.head.size() != sized.head.size())
            st = makeError(Error::Code::Format, "the archive head of " + t.key + " changed size")
                     .inFile(path);
        if (st)
            st = writeAt(fd, a.head, t.chunks.front().offset, path);
        if (!st)
            return st;
    }
    for (const ObjectWrite &w : plan.objectWrites)
        if (Status st = writeAll(fd, w.bytes, path); !st)
            return st;
    return Ok{};
}

} // namespace shardscope::detail
