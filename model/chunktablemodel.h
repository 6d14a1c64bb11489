// SPDX-License-Identifier: MIT
#pragma once

#include "flattablemodel.h"

#include <memory>

namespace shardscope {
struct CheckpointIndex;
struct TensorEntry;
} // namespace shardscope

namespace shardscope::model {

/**
 * The stored chunks of one tensor, one row each: position in the global tensor (offsets,
 * sizes) and where its bytes live (file, byte offset, length). Reads the shared snapshot; a
 * tensor with many chunks costs nothing until rows are shown.
 */
class ChunkTableModel : public FlatTableModel
{
    Q_OBJECT

public:
    enum Column : int {
        IndexColumn,
        OffsetsColumn,
        SizesColumn,
        FileColumn,
        ByteOffsetColumn,
        LengthColumn,
        DataColumn, ///< the chunk's elements × their size; Length adds the format's framing
        ColumnCount,
    };

    explicit ChunkTableModel(QObject *parent = nullptr);
    ~ChunkTableModel() override;

    /** Shows the chunks of `index->tensors[tensorIndex]`; a null index or -1 empties it. */
    void setTensor(std::shared_ptr<const CheckpointIndex> index, int tensorIndex);
    void clear() { setTensor(nullptr, -1); }
    const TensorEntry *tensor() const;

    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    int rows() const override;
    QVariant cellData(const QModelIndex &index, int role) const override;

    static Qt::Alignment alignment(int column);
    /** The bytes of row's elements (its sizes × the element size). */
    static uint64_t dataBytes(const TensorEntry &t, size_t row);
    /** Why the stored length is what it is, when it is more than the data. */
    QString lengthToolTip(const TensorEntry &t, size_t row) const;

    std::shared_ptr<const CheckpointIndex> m_index;
    int m_tensor = -1;
};

} // namespace shardscope::model
