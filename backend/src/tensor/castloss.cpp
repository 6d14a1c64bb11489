// SPDX-License-Identifier: MIT
// What a load's dtype cast does to stored values, measured with torch's own conversion (the one
// DCP's copy_ performs): the worst absolute and relative change of any element.
#include "shardscope/diff.h"
#include "shardscope/tensor.h"

#include "tensor/floatformat.h"
#include "tensor/scalartype.h"

#include <ATen/ATen.h>

#include <cmath>

namespace shardscope {

namespace torchmod {

Result<CastLoss> measureCast(const TensorData &stored, DType to)
{
    const auto from = detail::scalarType(stored.dtype), target = detail::scalarType(to);
    if (!from || !target || !detail::floatFormat(stored.dtype) || !detail::floatFormat(to))
        return makeError(Error::Code::Unsupported, "no cast measure from " +
                                                       std::string(dtypeName(stored.dtype)) +
                                                       " to " + std::string(dtypeName(to)));
    CastLoss loss;
    try {
        at::Tensor t = at::from_blob(const_cast<std::byte *>(stored.bytes.data()), {stored.numel()},
                                     at::TensorOptions().dtype(*from));
        // In slices: the double-precision copies stay small whatever the tensor's size.
        const int64_t slice = 1 << 20;
        for (int64_t start = 0; start < t.numel(); start += slice) {
            const int64_t n = std::min(slice, t.numel() - start);
            at::Tensor x = t.narrow(0, start, n);
            at::Tensor back = x.to(*target).to(at::kDouble);
            at::Tensor orig = x.to(at::kDouble);
            at::Tensor diff = (back - orig).abs();
            // What the cast keeps is no change (infinities included, where inf - inf is NaN);
            // NaN stays NaN; a finite value that becomes infinite is an overflow (inf change).
            diff.masked_fill_(back == orig, 0.0);
            diff.masked_fill_(orig.isnan(), 0.0);
            loss.changed += (diff != 0).sum().item<int64_t>();
            const auto [worst, at] = diff.max(0);
            const double w = worst.item<double>();
            if (w > loss.maxAbs || loss.worstIndex < 0) {
                loss.maxAbs = w;
                loss.worstIndex = start + at.item<int64_t>();
                loss.worstValue = orig[at.item<int64_t>()].item<double>();
            }
            at::Tensor rel = diff / orig.abs();
            rel.masked_fill_(orig == 0, 0.0);
            rel.masked_fill_(orig.isnan(), 0.0);
            if (rel.numel())
                loss.maxRel = std::max(loss.maxRel, rel.max().item<double>());
            loss.count += n;
        }
    } catch (const std::exception &e) {
        return makeError(Error::Code::Internal, std::string("cast measure: ") + e.what());
    }
    if (loss.count == 0)
        loss.worstIndex = -1;
    return loss;
}

Result<TensorData> castTensor(const TensorData &data, DType to)
{
    const auto from = detail::scalarType(data.dtype), target = detail::scalarType(to);
    if (!from || !target)
        return makeError(Error::Code::Unsupported, "no cast from " +
                                                       std::string(dtypeName(data.dtype)) + " to " +
                                                       std::string(dtypeName(to)));
    TensorData out;
    out.dtype = to;
    out.shape = data.shape;
    try {
        out.bytes.resize(size_t(data.numel()) * size_t(elementSize(to)));
        at::Tensor src = at::from_blob(const_cast<std::byte *>(data.bytes.data()), {data.numel()},
                                       at::TensorOptions().dtype(*from));
        at::Tensor dst =
            at::from_blob(out.bytes.data(), {data.numel()}, at::TensorOptions().dtype(*target));
        dst.copy_(src);
    } catch (const std::exception &e) {
        return makeError(Error::Code::Internal, std::string("cast: ") + e.what());
    }
    return out;
}

} // namespace torchmod

} // namespace shardscope
