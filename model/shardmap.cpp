// SPDX-License-Identifier: MIT
#include "shardmap.h"

#include <shardscope/session.h>

#include <algorithm>
#include <map>
#include <set>

namespace shardscope::model {

namespace {

// A box over the first two dimensions (a vector: rows only).
ShardMap::Box box2d(std::span<const int64_t> offsets, std::span<const int64_t> sizes)
{
    ShardMap::Box b;
    if (!offsets.empty()) {
        b.row = offsets[0];
        b.rows = sizes[0];
    } else {
        b.rows = 1;
    }
    if (offsets.size() >= 2) {
        b.col = offsets[1];
        b.cols = sizes[1];
    } else {
        b.cols = 1;
    }
    return b;
}

bool intersects(const ShardMap::Box &a, const ShardMap::Box &b)
{
    return a.row < b.row + b.rows && b.row < a.row + a.rows && a.col < b.col + b.cols &&
           b.col < a.col + a.cols;
}

// Cells of the rows × cols map no box covers: a sweep over the rows where boxes start or end.
int64_t uncoveredCells(const std::vector<ShardMap::Box> &boxes, int64_t rows, int64_t cols)
{
    std::set<int64_t> cuts{0, rows};
    for (const ShardMap::Box &b : boxes) {
        cuts.insert(std::clamp<int64_t>(b.row, 0, rows));
        cuts.insert(std::clamp<int64_t>(b.row + b.rows, 0, rows));
    }
    int64_t uncovered = 0;
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
        const int64_t r0 = *it, r1 = *std::next(it);
        spans.clear();
        for (const ShardMap::Box &b : boxes)
            if (b.row <= r0 && b.row + b.rows >= r1)
                spans.emplace_back(std::max<int64_t>(b.col, 0),
                                   std::min<int64_t>(b.col + b.cols, cols));
        std::sort(spans.begin(), spans.end());
        int64_t covered = 0, reach = 0;
        for (const auto &[c0, c1] : spans) {
            const int64_t from = std::max(c0, reach);
            if (c1 > from)
                covered += c1 - from;
            reach = std::max(reach, c1);
        }
        uncovered += (r1 - r0) * (cols - covered);
    }
    return uncovered;
}

} // namespace

ShardMap shardMap(const CheckpointIndex &index, const QString &key, const DiffResult *diff,
                  const VerifyReport *verification)
{
    ShardMap map;
    const std::string k = key.toStdString();
    const auto t = std::find_if(index.tensors.begin(), index.tensors.end(),
                                [&k](const TensorEntry &e) { return e.key == k; });
    if (t == index.tensors.end())
        return map;
    map.key = key;
    map.rows = t->shape.empty() ? 1 : t->shape[0];
    map.cols = t->shape.size() >= 2 ? t->shape[1] : 1;
    map.folded = t->shape.size() > 2;

    std::map<uint32_t, int> fileSlot;
    for (size_t i = 0; i < t->chunks.size(); ++i) {
        ShardMap::Box b = box2d(t->chunkOffsets(i), t->chunkSizes(i));
        const uint32_t file = t->chunks[i].file;
        auto [it, added] = fileSlot.emplace(file, int(map.files.size()));
        if (added)
            map.files.push_back(file < index.files.size()
                                    ? QString::fromStdString(index.files[file])
                                    : QStringLiteral("?"));
        b.file = it->second;
        map.chunks.push_back(b);
    }
    const size_t checked = std::min<size_t>(map.chunks.size(), 4096);
    for (size_t i = 0; i < checked; ++i)
        for (size_t j = i + 1; j < checked; ++j)
            if (intersects(map.chunks[i], map.chunks[j]))
                map.chunks[i].overlaps = map.chunks[j].overlaps = true;
    map.uncovered = uncoveredCells(map.chunks, map.rows, map.cols);

    // The parameters a load cuts out of this key, by the rows of it they take.
    if (diff) {
        for (const DiffEntry &e : diff->entries) {
            if (e.section != Section::Model)
                continue;
            for (const DiffSource &s : e.sources) {
                if (s.key != k || s.dim != 0)
                    continue;
                const int64_t rows = s.end > s.begin ? s.end - s.begin : map.rows;
                if (rows >= map.rows && s.storedRow == 0)
                    continue; // the whole key: no section to mark
                map.sections.push_back({s.storedRow, rows, QString::fromStdString(e.name)});
            }
        }
        std::sort(map.sections.begin(), map.sections.end(),
                  [](const auto &a, const auto &b) { return a.row < b.row; });
    }
    // What each rank reads of it, as planned.
    if (verification && verification->plan) {
        for (const RankPlan &r : verification->plan->ranks)
            for (const ShardRead &read : r.reads)
                if (read.key == k && read.index.empty()) {
                    ShardMap::Box b = box2d(read.offsets, read.sizes);
                    b.rank = r.rank;
                    map.reads.push_back(b);
                }
    }
    return map;
}

} // namespace shardscope::model
