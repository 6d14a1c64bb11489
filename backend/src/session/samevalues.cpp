// SPDX-License-Identifier: MIT
#include "session/opened.h"

#include "shardscope/loadplan.h"

#include <algorithm>
#include <cstring>

namespace shardscope::detail {

namespace {

// A block of rows along the tensor's first own dimension (after a stacked key's axes).
Result<TensorData> readRows(const CheckpointIndex &index, const TensorEntry &t, const DiffSource &s,
                            int64_t from, int64_t rows)
{
    Box box;
    box.offsets.assign(t.ndim(), 0);
    box.sizes = t.shape.toVector();
    const size_t lead = std::min(s.index.size(), t.ndim());
    for (size_t d = 0; d < lead; ++d) {
        box.offsets[d] = s.index[d];
        box.sizes[d] = 1;
    }
    if (lead < t.ndim()) {
        box.offsets[lead] = from;
        box.sizes[lead] = rows;
    }
    return readTensor(index, t, box);
}

} // namespace

std::optional<bool> sameStoredValues(const CheckpointIndex &index, const DiffSource &a,
                                     const DiffSource &b)
{
    const TensorEntry *x = sourceTensor(index, a), *y = sourceTensor(index, b);
    if (!x || !y || x->dtype != y->dtype || elementSize(x->dtype) == 0)
        return std::nullopt;
    const size_t lx = std::min(a.index.size(), x->ndim()), ly = std::min(b.index.size(), y->ndim());
    const std::vector<int64_t> sx(x->shape.begin() + std::ptrdiff_t(lx), x->shape.end()),
        sy(y->shape.begin() + std::ptrdiff_t(ly), y->shape.end());
    if (sx != sy)
        return false;
    // In blocks of about 64 MiB: an embedding is gigabytes.
    const int64_t rows = sx.empty() ? 1 : sx.front();
    uint64_t rowBytes = uint64_t(elementSize(x->dtype));
    for (size_t d = 1; d < sx.size(); ++d)
        rowBytes *= uint64_t(sx[d]);
    const int64_t step =
        std::max<int64_t>(1, int64_t((uint64_t(64) << 20) / std::max<uint64_t>(1, rowBytes)));
    for (int64_t from = 0; from < rows; from += step) {
        const int64_t n = sx.empty() ? 1 : std::min(step, rows - from);
        auto da = readRows(index, *x, a, from, n);
        auto db = readRows(index, *y, b, from, n);
        if (!da || !db)
            return std::nullopt;
        if (da->bytes.size() != db->bytes.size() ||
            std::memcmp(da->bytes.data(), db->bytes.data(), da->bytes.size()) != 0)
            return false;
        if (sx.empty())
            break;
    }
    return true;
}

DiffOptions withValueComparison(DiffOptions options, const CheckpointIndex &index)
{
    options.sameValues = [&index](const DiffSource &a, const DiffSource &b) {
        return sameStoredValues(index, a, b);
    };
    return options;
}

} // namespace shardscope::detail
