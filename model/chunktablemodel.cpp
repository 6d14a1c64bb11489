// SPDX-License-Identifier: MIT
#include "chunktablemodel.h"

#include "formatting.h"
#include "roles.h"

#include <shardscope/checkpoint.h>
#include <shardscope/dtype.h>

#include <algorithm>

namespace shardscope::model {

ChunkTableModel::ChunkTableModel(QObject *parent)
    : FlatTableModel({tr("#"), tr("Offsets"), tr("Sizes"), tr("File"), tr("Byte offset"),
                      tr("Length"), tr("Data")},
                     parent)
{}

ChunkTableModel::~ChunkTableModel() = default;

void ChunkTableModel::setTensor(std::shared_ptr<const CheckpointIndex> index, int tensorIndex)
{
    beginResetModel();
    const bool valid = index && tensorIndex >= 0 && size_t(tensorIndex) < index->tensors.size();
    m_index = valid ? std::move(index) : nullptr;
    m_tensor = valid ? tensorIndex : -1;
    endResetModel();
}

const TensorEntry *ChunkTableModel::tensor() const
{
    return m_index ? &m_index->tensors[size_t(m_tensor)] : nullptr;
}

int ChunkTableModel::rows() const
{
    const TensorEntry *t = tensor();
    return t ? int(t->chunks.size()) : 0;
}

uint64_t ChunkTableModel::dataBytes(const TensorEntry &t, size_t row)
{
    uint64_t n = uint64_t(elementSize(t.dtype));
    for (const int64_t s : t.chunkSizes(row))
        n *= uint64_t(std::max<int64_t>(s, 0));
    return n;
}

QString ChunkTableModel::lengthToolTip(const TensorEntry &t, size_t row) const
{
    const Location &loc = t.chunks[row];
    QString tip = tr("%1 bytes stored").arg(formatCount(loc.length));
    const bool haveDims = t.chunkDims.size() >= 2 * t.ndim() * (row + 1);
    if (!haveDims || elementSize(t.dtype) <= 0) // no element size: the data's bytes unknown
        return tip;
    const uint64_t data = dataBytes(t, row);
    // DCP writes each chunk as a torch.save archive of its own: the ZIP records, the pickle and
    // the padding that torch aligns data to are stored around the elements.
    if (loc.encoding == Encoding::TorchSaveArchive && loc.length > data)
        tip += tr(": the chunk's %1 bytes of data inside a torch.save archive of its own (DCP "
                  "saves each chunk with torch.save; its ZIP records, pickle and alignment "
                  "padding take the other %2 bytes)")
                   .arg(formatCount(data), formatCount(loc.length - data));
    else if (loc.length > data)
        tip += tr(": %1 bytes of data, the rest belongs to the storage this chunk is a view of")
                   .arg(formatCount(data));
    return tip;
}

QVariant ChunkTableModel::cellData(const QModelIndex &index, int role) const
{
    const TensorEntry *t = tensor();
    const size_t row = size_t(index.row());
    const Location &loc = t->chunks[row];
    // chunkDims holds offsets and sizes for every chunk; guard against a short vector.
    const bool haveDims = t->chunkDims.size() >= 2 * t->ndim() * (row + 1);
    if (role == Qt::TextAlignmentRole)
        return QVariant::fromValue(alignment(index.column()));
    if (role == Qt::DisplayRole || role == Qt::ToolTipRole) {
        switch (index.column()) {
        case IndexColumn:
            return QString::number(row);
        case OffsetsColumn:
            return haveDims ? formatShape(t->chunkOffsets(row)) : QString();
        case SizesColumn:
            return haveDims ? formatShape(t->chunkSizes(row)) : QString();
        case FileColumn:
            return loc.file < m_index->files.size() ? displayText(m_index->files[loc.file])
                                                    : tr("<file %1>").arg(loc.file);
        case ByteOffsetColumn:
            return formatCount(loc.offset);
        case LengthColumn:
            return role == Qt::ToolTipRole ? lengthToolTip(*t, row) : formatBytes(loc.length);
        case DataColumn:
            return haveDims && elementSize(t->dtype) > 0 ? formatBytes(dataBytes(*t, row))
                                                         : QString();
        default:
            return {};
        }
    }
    if (role == SortRole) {
        switch (index.column()) {
        case IndexColumn:
            return qulonglong(row);
        case ByteOffsetColumn:
            return qulonglong(loc.offset);
        case LengthColumn:
            return qulonglong(loc.length);
        case DataColumn:
            return qulonglong(haveDims && elementSize(t->dtype) > 0 ? dataBytes(*t, row) : 0);
        default:
            return data(index, Qt::DisplayRole);
        }
    }
    return {};
}

Qt::Alignment ChunkTableModel::alignment(int column)
{
    switch (column) {
    case IndexColumn:
        return Qt::AlignCenter;
    case ByteOffsetColumn:
    case LengthColumn:
    case DataColumn:
        return Qt::AlignRight | Qt::AlignVCenter;
    default:
        return Qt::AlignLeft | Qt::AlignVCenter;
    }
}

QVariant ChunkTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::TextAlignmentRole)
        return QVariant::fromValue(alignment(section));
    return FlatTableModel::headerData(section, orientation, role);
}

} // namespace shardscope::model
