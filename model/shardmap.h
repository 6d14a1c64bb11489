// SPDX-License-Identifier: MIT
#pragma once

#include <QString>
#include <QStringList>

#include <cstdint>
#include <vector>

namespace shardscope {
struct CheckpointIndex;
struct DiffResult;
struct VerifyReport;
} // namespace shardscope

namespace shardscope::model {

/**
 * Where a stored tensor's elements are, as a map of rows × columns: its chunks (which file holds
 * which box), the elements no chunk holds and those two chunks both claim, the rows at which a
 * fused tensor's sections begin (the parameters a load cuts out of it), and, after a verified
 * load, the box each rank reads. A tensor of more than two dimensions is drawn over its first
 * two (the rest folded into each cell); a vector is one column.
 */
struct ShardMap
{
    struct Box
    {
        int64_t row = 0, col = 0, rows = 0, cols = 0;
        int file = -1;         ///< chunks: index into files
        int rank = -1;         ///< reads: the rank
        bool overlaps = false; ///< chunks: shares elements with another chunk
    };
    struct Section
    {
        int64_t row = 0, rows = 0;
        QString name; ///< the parameter these rows fill
    };
    QString key;
    int64_t rows = 1, cols = 1;
    bool folded = false; ///< dimensions beyond the second folded
    std::vector<Box> chunks;
    QStringList files;
    int64_t uncovered = 0; ///< cells of the map no chunk holds
    std::vector<Section> sections;
    std::vector<Box> reads;
    bool valid() const { return !key.isEmpty(); }
};

/** The map of `key` (empty when the checkpoint has no such tensor). Overlaps are looked for
 *  among the first 4,096 chunks only (pairwise). */
ShardMap shardMap(const CheckpointIndex &index, const QString &key, const DiffResult *diff,
                  const VerifyReport *verification);

} // namespace shardscope::model
