// SPDX-License-Identifier: MIT
// Assembling tensors from stored chunks, and statistics. The one place libtorch does the work.
#include "read/itemloader.h"
#include "read/readers.h"
#include "read/torchsave.h"
#include "shardscope/tensor.h"
#include "tensor/scalartype.h"

#include <ATen/ATen.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

// Part of the torch module (tensor/torchops.h): the backend reaches these through its table.
namespace shardscope::torchmod {

using namespace detail;

namespace {

// Copies are done on same-width integer views: bit-exact by construction (no NaN
// canonicalisation) and independent of which dtypes a kernel happens to support.
c10::ScalarType bitsType(int elementSize)
{
    switch (elementSize) {
    case 1:
        return at::kByte;
    case 2:
        return at::kShort;
    case 4:
        return at::kInt;
    case 8:
        return at::kLong;
    default:
        return at::kComplexDouble; // 16 bytes
    }
}

at::Tensor viewBytes(const uint8_t *data, const std::vector<int64_t> &shape,
                     const std::vector<int64_t> &strides, int es)
{
    // from_blob never frees or writes: the mapping is read-only and only read from here.
    return at::from_blob(const_cast<uint8_t *>(data), shape, strides,
                         at::TensorOptions().dtype(bitsType(es)));
}

struct ChunkView
{
    LoadedItem item;
    at::Tensor tensor;
};

Result<ChunkView> loadChunk(const CheckpointIndex &index, const TensorEntry &t, size_t c,
                            FileCache &files)
{
    const Location &loc = t.chunks[c];
    const int es = elementSize(t.dtype);
    // A transformed item holds this chunk (torch.save clones a view before saving it): twice its
    // bytes and an archive's records is more than any writer needs. Sizes are lies until
    // checked: an overflow leaves the bound at its largest.
    uint64_t extent = uint64_t(es), need = 0;
    for (int64_t s : t.chunkSizes(c))
        if (__builtin_mul_overflow(extent, uint64_t(std::max<int64_t>(s, 0)), &extent))
            extent = UINT64_MAX;
    const uint64_t offset =
        uint64_t(std::clamp<int64_t>(t.storageOffset, 0, int64_t(1) << 40)) * uint64_t(es);
    if (__builtin_add_overflow(extent, offset, &need) ||
        __builtin_mul_overflow(need, uint64_t(2), &need) ||
        __builtin_add_overflow(need, uint64_t(1) << 20, &need))
        need = UINT64_MAX;
    auto item = loadItem(index, loc, files, need);
    if (!item)
        return item.error().atKey(t.key.str());
    ChunkView v;
    v.item = std::move(*item);
    std::vector<int64_t> sizes(t.chunkSizes(c).begin(), t.chunkSizes(c).end());
    if (loc.encoding == Encoding::RawStorage) {
        // A tensor's one storage keeps its own strides (torch.save, safetensors); a chunk of a
        // DCP kept in safetensors is its elements in row-major order (read/dcpsafetensors.cpp).
        if (t.strides.size() != sizes.size()) {
            std::vector<int64_t> strides(sizes.size(), 1);
            for (size_t i = sizes.size(); i-- > 1;)
                strides[i - 1] = strides[i] * std::max<int64_t>(sizes[i], 1);
            v.tensor = viewBytes(v.item.bytes.data(), sizes, strides, es);
            return v;
        }
        const uint8_t *p = v.item.bytes.data() + uint64_t(t.storageOffset) * uint64_t(es);
        v.tensor = viewBytes(p, sizes, t.strides, es);
        return v;
    }
    auto payload = TorchSavePayload::open(v.item.bytes, v.item.base);
    if (!payload)
        return payload.error().inFile(v.item.path).atKey(t.key.str());
    auto spec = payload->tensorSpec(payload->root());
    if (!spec)
        return spec.error().inFile(v.item.path).atKey(t.key.str());
    if (spec->shape != sizes || spec->dtype != t.dtype)
        return makeError(Error::Code::Format, "stored chunk is " + spec->dtypeName +
                                                  " of another shape than the " + t.dtypeName +
                                                  " chunk the metadata describes")
            .inFile(v.item.path)
            .atKey(t.key.str())
            .atOffset(v.item.base);
    const uint8_t *p =
        v.item.bytes.data() + spec->recordOffset + uint64_t(spec->storageOffset) * uint64_t(es);
    v.tensor = viewBytes(p, sizes, spec->strides, es);
    return v;
}

} // namespace

namespace {

// Walks the chunks of `t` that meet the box: `f(src, out, chunk)` gets each chunk's part and the
// same part of `dst` (the box's shape, row-major); an error when the chunks leave a hole.
template<typename F>
Status forEachPart(const CheckpointIndex &index, const TensorEntry &t,
                   const std::vector<int64_t> &bo, const std::vector<int64_t> &bs, at::Tensor dst,
                   F &&f)
{
    const size_t nd = t.ndim();
    FileCache files(index);
    int64_t boxNumel = 1;
    for (int64_t s : bs)
        boxNumel *= s;
    int64_t covered = 0;
    // An empty box is read from nothing (torch's load reads no item for it either: a damaged
    // one is no reason to fail).
    if (boxNumel == 0 && !t.chunks.empty())
        return Ok{};
    for (size_t c = 0; c < t.chunks.size(); ++c) {
        auto co = t.chunkOffsets(c);
        auto cs = t.chunkSizes(c);
        std::vector<int64_t> lo(nd), len(nd);
        int64_t vol = 1;
        bool hit = true;
        for (size_t d = 0; d < nd; ++d) {
            lo[d] = std::max(co[d], bo[d]);
            const int64_t hi = std::min(co[d] + cs[d], bo[d] + bs[d]);
            len[d] = hi - lo[d];
            if (len[d] < 0 || (len[d] == 0 && boxNumel > 0))
                hit = false;
            vol *= std::max<int64_t>(len[d], 0);
        }
        if (!hit)
            continue;
        auto chunk = loadChunk(index, t, c, files);
        if (!chunk)
            return chunk.error();
        at::Tensor src = chunk->tensor, out = dst;
        for (size_t d = 0; d < nd; ++d) {
            src = src.narrow(int64_t(d), lo[d] - co[d], len[d]);
            out = out.narrow(int64_t(d), lo[d] - bo[d], len[d]);
        }
        if (Status st = f(src, out, *chunk); !st)
            return st;
        covered += vol;
        if (boxNumel == 0)
            break;
    }
    if (covered < boxNumel || (boxNumel == 0 && t.chunks.empty()))
        return makeError(Error::Code::Format, "stored chunks cover " + std::to_string(covered) +
                                                  " of " + std::to_string(boxNumel) +
                                                  " requested elements")
            .atKey(t.key.str());
    return Ok{};
}

std::span<const uint8_t> bytesOf(const at::Tensor &t)
{
    return {static_cast<const uint8_t *>(t.data_ptr()), size_t(t.nbytes())};
}

// A strided view of a file-backed chunk, as a tensor over bytes read with pread(): touching the
// mapping instead would turn a disk error, or a file cut since it was mapped, into SIGBUS.
Result<at::Tensor> readView(const at::Tensor &src, const ChunkView &chunk, const std::string &key,
                            std::vector<uint8_t> &bounce)
{
    if (!chunk.item.owned.empty() || !chunk.item.file || src.numel() == 0)
        return src;
    int64_t last = 0; // the furthest element from the first, in elements
    for (int64_t d = 0; d < src.dim(); ++d)
        last += (src.size(d) - 1) * src.stride(d);
    const size_t span = size_t(last + 1) * size_t(src.element_size());
    bounce.resize(span);
    const auto *first = static_cast<const uint8_t *>(src.data_ptr());
    if (Status st = chunk.item.file->copyOut({first, span}, bounce.data()); !st)
        return st.error().atKey(key);
    return at::from_blob(bounce.data(), src.sizes(), src.strides(), src.options());
}

// Copies the box of `t` from its chunks into `dst` (the box's shape, row-major).
Status assemble(const CheckpointIndex &index, const TensorEntry &t, const std::vector<int64_t> &bo,
                const std::vector<int64_t> &bs, at::Tensor dst)
{
    return forEachPart(
        index, t, bo, bs, dst,
        [&](const at::Tensor &src, at::Tensor &out, const ChunkView &chunk) -> Status {
            // Contiguous on both sides (whole rows of a row-major chunk): no
            // TensorIterator, which wakes OpenMP's spinning workers on every
            // large copy; stored bytes come by pread(), not by faulting the
            // mapping's pages in.
            if (!src.is_contiguous() || !out.is_contiguous()) {
                thread_local std::vector<uint8_t> bounce;
                auto view = readView(src, chunk, t.key.str(), bounce);
                if (!view)
                    return view.error();
                out.copy_(*view);
                if (bounce.capacity() > (size_t(64) << 20)) // not held past a large chunk
                    std::vector<uint8_t>().swap(bounce);
                return Ok{};
            }
            if (chunk.item.owned.empty() && chunk.item.file) {
                if (Status st = chunk.item.file->copyOut(bytesOf(src), out.data_ptr()); !st)
                    return st.error().atKey(t.key.str());
                return Ok{};
            }
            if (src.nbytes() > 0) // an empty tensor's data pointer may be null
                std::memcpy(out.data_ptr(), src.data_ptr(), size_t(src.nbytes()));
            return Ok{};
        });
}

// Compares the box of `t` with `expected` (viewed as `dst`): pieces small enough to stay in
// cache, so that no second copy of the box goes through memory.
Status compareStored(const CheckpointIndex &index, const TensorEntry &t,
                     const std::vector<int64_t> &bo, const std::vector<int64_t> &bs, at::Tensor dst,
                     bool &same)
{
    constexpr size_t kPiece = size_t(1) << 20;
    thread_local std::vector<uint8_t> bounce;
    same = true;
    return forEachPart(
        index, t, bo, bs, dst,
        [&](const at::Tensor &src, at::Tensor &out, const ChunkView &chunk) -> Status {
            if (!same)
                return Ok{};
            if (!src.is_contiguous() || !out.is_contiguous()) {
                auto view = readView(src, chunk, t.key.str(), bounce);
                if (!view)
                    return view.error();
                same = at::equal(*view, out); // integer views: bit for bit
                return Ok{};
            }
            const auto from = bytesOf(src);
            const auto *want = static_cast<const uint8_t *>(out.data_ptr());
            if (!chunk.item.owned.empty() || !chunk.item.file) {
                same = from.empty() || std::memcmp(from.data(), want, from.size()) == 0;
                return Ok{};
            }
            bounce.resize(std::min(kPiece, from.size()));
            for (size_t at = 0; at < from.size() && same; at += kPiece) {
                const size_t n = std::min(kPiece, from.size() - at);
                if (Status st = chunk.item.file->copyOut(from.subspan(at, n), bounce.data()); !st)
                    return st.error().atKey(t.key.str());
                same = std::memcmp(bounce.data(), want + at, n) == 0;
            }
            return Ok{};
        });
}

// The box, checked against the tensor (an empty box: the whole tensor).
Status boxOf(const TensorEntry &t, const Box &box, std::vector<int64_t> &bo,
             std::vector<int64_t> &bs)
{
    const int es = elementSize(t.dtype);
    if (es == 0 || !scalarType(t.dtype))
        return makeError(Error::Code::Unsupported, "cannot decode dtype '" + t.dtypeName + "'")
            .atKey(t.key.str());
    const size_t nd = t.ndim();
    bo = box.offsets;
    bs = box.sizes;
    if (bo.empty() && bs.empty()) {
        bo.assign(nd, 0);
        bs = t.shape.toVector();
    }
    if (bo.size() != nd || bs.size() != nd)
        return makeError(Error::Code::Format, "box rank differs from the tensor's")
            .atKey(t.key.str());
    for (size_t d = 0; d < nd; ++d)
        if (bo[d] < 0 || bs[d] < 0 || bo[d] + bs[d] > t.shape[d])
            return makeError(Error::Code::Format, "box lies outside the tensor").atKey(t.key.str());
    return Ok{};
}

Error libtorchError(const TensorEntry &t, const std::exception &e)
{
    if (const auto *c10 = dynamic_cast<const c10::Error *>(&e))
        return makeError(Error::Code::Internal,
                         std::string("libtorch: ") + c10->what_without_backtrace())
            .atKey(t.key.str());
    return makeError(Error::Code::Limit, e.what()).atKey(t.key.str()); // allocation
}

} // namespace

Result<TensorData> readTensor(const CheckpointIndex &index, const TensorEntry &t, const Box &box)
{
    std::vector<int64_t> bo, bs;
    if (Status st = boxOf(t, box, bo, bs); !st)
        return st.error();
    // Nothing is allocated for a size the files cannot hold: the box must be covered by chunks
    // whose stored bytes lie inside their files (a tensor claiming a petabyte fails here).
    int64_t n = 1;
    for (int64_t s : bs)
        n *= s;
    uint64_t covered = 0;
    for (size_t c = 0; c < t.chunks.size(); ++c) {
        const Location &loc = t.chunks[c];
        const uint64_t size = loc.file < index.fileSizes.size() ? index.fileSizes[loc.file] : 0;
        const bool plain =
            index.transformChains.empty() || index.transformChains.at(loc.transforms).empty();
        if (plain && loc.file < index.files.size() && size != UINT64_MAX &&
            (loc.offset > size || loc.length > size - loc.offset))
            return makeError(Error::Code::Format, "item [" + std::to_string(loc.offset) + ", +" +
                                                      std::to_string(loc.length) +
                                                      ") runs past the end of the " +
                                                      std::to_string(size) + "-byte file")
                .inFile((std::filesystem::path(index.dataDir) / index.files[loc.file]).string())
                .atKey(t.key.str())
                .atOffset(loc.offset);
        if (t.chunkDims.size() < 2 * t.ndim() * (c + 1))
            continue; // not a shape the indexer wrote; the read reports it
        uint64_t volume = 1;
        for (int64_t s : t.chunkSizes(c))
            volume = s > 0 && volume <= UINT64_MAX / uint64_t(s) ? volume * uint64_t(s) : 0;
        covered = volume > UINT64_MAX - covered ? UINT64_MAX : covered + volume;
    }
    if (t.chunkDims.size() >= 2 * t.ndim() * t.chunks.size() && covered < uint64_t(n))
        return makeError(Error::Code::Format, "stored chunks hold " + std::to_string(covered) +
                                                  " of " + std::to_string(n) + " elements")
            .atKey(t.key.str());
    TensorData out;
    out.dtype = t.dtype;
    out.shape = bs;
    try {
        out.bytes.resize(size_t(n) * size_t(elementSize(t.dtype)));
    } catch (const std::exception &e) {
        return libtorchError(t, e);
    }
    if (Status st = readTensorInto(index, t, box, out.bytes); !st)
        return st.error();
    return out;
}

namespace {

// The box of `t` (checked) and `bytes` viewed as a tensor of its shape (same-width integers);
// an error when `bytes` is not exactly the box's size. from_blob neither frees nor copies.
Status boxView(const TensorEntry &t, const Box &box, std::span<const std::byte> bytes,
               std::vector<int64_t> &bo, std::vector<int64_t> &bs, at::Tensor &view)
{
    if (Status st = boxOf(t, box, bo, bs); !st)
        return st;
    const int es = elementSize(t.dtype);
    int64_t n = 1;
    for (int64_t s : bs)
        n *= s;
    if (bytes.size() != size_t(n) * size_t(es))
        return makeError(Error::Code::Internal, "buffer is not the box's size").atKey(t.key.str());
    view = at::from_blob(const_cast<std::byte *>(bytes.data()), bs,
                         at::TensorOptions().dtype(bitsType(es)));
    return Ok{};
}

} // namespace

Status readTensorInto(const CheckpointIndex &index, const TensorEntry &t, const Box &box,
                      std::span<std::byte> out)
{
    try {
        // The caller's memory as the destination tensor: chunks are copied straight into it.
        std::vector<int64_t> bo, bs;
        at::Tensor dst;
        if (Status st = boxView(t, box, out, bo, bs, dst); !st)
            return st;
        return assemble(index, t, bo, bs, dst);
    } catch (const std::exception &e) {
        return libtorchError(t, e);
    }
}

Result<bool> sameAsStored(const CheckpointIndex &index, const TensorEntry &t, const Box &box,
                          std::span<const std::byte> expected)
{
    try {
        std::vector<int64_t> bo, bs;
        at::Tensor view; // only read from
        if (Status st = boxView(t, box, expected, bo, bs, view); !st)
            return st.error();
        bool same = true;
        if (Status st = compareStored(index, t, bo, bs, view, same); !st)
            return st.error();
        return same;
    } catch (const std::exception &e) {
        return libtorchError(t, e);
    }
}

Result<TensorStats> computeStats(const TensorData &data)
{
    auto st = scalarType(data.dtype);
    if (!st)
        return makeError(Error::Code::Unsupported, "no statistics for this dtype");
    if (data.dtype == DType::Float4E2M1FNx2) // torch converts it to nothing, so no moments either
        return makeError(Error::Code::Unsupported, "no statistics for float4_e2m1fn_x2");
    TensorStats s;
    try {
        at::Tensor t = at::from_blob(const_cast<std::byte *>(data.bytes.data()), {data.numel()},
                                     at::TensorOptions().dtype(*st));
        if (isComplex(data.dtype))
            t = at::view_as_real(t.to(at::kComplexDouble)).reshape({-1});
        double mean = 0, m2 = 0, sumsq = 0;
        bool first = true;
        // Slices bound the double-precision copy; Welford keeps mean/std exact enough.
        const int64_t slice = 1 << 20;
        for (int64_t start = 0; start < t.numel(); start += slice) {
            const int64_t n = std::min(slice, t.numel() - start);
            at::Tensor d = t.narrow(0, start, n).to(at::kDouble).contiguous();
            const double *p = d.data_ptr<double>();
            for (int64_t i = 0; i < n; ++i) {
                const double x = p[i];
                ++s.count;
                if (std::isnan(x)) {
                    ++s.nanCount;
                    continue;
                }
                if (std::isinf(x)) {
                    ++(x > 0 ? s.posInfCount : s.negInfCount);
                    continue;
                }
                ++s.finite;
                if (first) {
                    s.min = s.max = x;
                    first = false;
                } else {
                    s.min = std::min(s.min, x);
                    s.max = std::max(s.max, x);
                }
                const double delta = x - mean;
                mean += delta / double(s.finite);
                m2 += delta * (x - mean);
                sumsq += x * x;
            }
        }
        s.mean = s.finite ? mean : std::numeric_limits<double>::quiet_NaN();
        s.std =
            s.finite ? std::sqrt(m2 / double(s.finite)) : std::numeric_limits<double>::quiet_NaN();
        s.l2 = std::sqrt(sumsq);
        if (!s.finite)
            s.min = s.max = std::numeric_limits<double>::quiet_NaN();
        return s;
    } catch (const c10::Error &e) {
        return makeError(Error::Code::Internal,
                         std::string("libtorch: ") + e.what_without_backtrace());
    } catch (const std::exception &e) {
        return makeError(Error::Code::Limit, e.what());
    }
}

} // namespace shardscope::torchmod
