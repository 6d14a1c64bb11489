// SPDX-License-Identifier: MIT
#pragma once

#include <QAbstractTableModel>

#include <memory>

namespace shardscope {
struct CheckpointIndex;
struct Problem;
} // namespace shardscope

namespace shardscope::model {

/** CheckpointIndex::problems as a table: key, file, byte offset, what it does to a load, message.
 */
class ProblemListModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    enum Column : int {
        KeyColumn,
        FileColumn,
        OffsetColumn,
        EffectColumn,
        MessageColumn,
        ColumnCount,
    };

    explicit ProblemListModel(QObject *parent = nullptr);
    ~ProblemListModel() override;

    void setIndex(std::shared_ptr<const CheckpointIndex> index);
    void clear() { setIndex(nullptr); }
    const Problem *problemAt(int row) const;

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    std::shared_ptr<const CheckpointIndex> m_index;
};

} // namespace shardscope::model
