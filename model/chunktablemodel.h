// SPDX-License-Identifier: MIT
#pragma once

#include <QAbstractTableModel>

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
class ChunkTableModel : public QAbstractTableModel
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
        ColumnCount,
    };

    explicit ChunkTableModel(QObject *parent = nullptr);
    ~ChunkTableModel() override;

    /** Shows the chunks of `index->tensors[tensorIndex]`; a null index or -1 empties it. */
    void setTensor(std::shared_ptr<const CheckpointIndex> index, int tensorIndex);
    void clear() { setTensor(nullptr, -1); }
    const TensorEntry *tensor() const;

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    static Qt::Alignment alignment(int column);

    std::shared_ptr<const CheckpointIndex> m_index;
    int m_tensor = -1;
};

} // namespace shardscope::model
