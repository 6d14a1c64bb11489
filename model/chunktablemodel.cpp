// SPDX-License-Identifier: MIT
#include "chunktablemodel.h"

#include "formatting.h"
#include "roles.h"

#include <shardscope/checkpoint.h>

namespace shardscope::model {

ChunkTableModel::ChunkTableModel(QObject *parent)
    : QAbstractTableModel(parent)
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

int ChunkTableModel::rowCount(const QModelIndex &parent) const
{
    const TensorEntry *t = tensor();
    return parent.isValid() || !t ? 0 : int(t->chunks.size());
}

int ChunkTableModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ChunkTableModel::data(const QModelIndex &index, int role) const
{
    const TensorEntry *t = tensor();
    if (!t ||
        !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
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
            return role == Qt::ToolTipRole ? tr("%1 bytes").arg(formatCount(loc.length))
                                           : formatBytes(loc.length);
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
        return Qt::AlignRight | Qt::AlignVCenter;
    default:
        return Qt::AlignLeft | Qt::AlignVCenter;
    }
}

QVariant ChunkTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::TextAlignmentRole)
        return QVariant::fromValue(alignment(section));
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case IndexColumn:
        return tr("#");
    case OffsetsColumn:
        return tr("Offsets");
    case SizesColumn:
        return tr("Sizes");
    case FileColumn:
        return tr("File");
    case ByteOffsetColumn:
        return tr("Byte offset");
    case LengthColumn:
        return tr("Length");
    default:
        return {};
    }
}

} // namespace shardscope::model
