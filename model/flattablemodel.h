// SPDX-License-Identifier: MIT
#pragma once

#include <QAbstractTableModel>
#include <QStringList>

#include <functional>

namespace shardscope::model {

/**
 * What the flat tables share (the load diff, the verification, the structural and value
 * comparisons, a tensor's chunks): fixed columns with their titles, rows only at the top level,
 * cells asked for only at valid indexes, contents swapped in one model reset. A table says how
 * many rows it has (rows()) and what a cell holds (cellData()).
 */
class FlatTableModel : public QAbstractTableModel
{
    Q_OBJECT

public:
    int rowCount(const QModelIndex &parent = {}) const final;
    int columnCount(const QModelIndex &parent = {}) const final;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const final;
    /** The titles as DisplayRole of the horizontal header; a table may add other roles. */
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

protected:
    FlatTableModel(QStringList titles, QObject *parent);

    virtual int rows() const = 0;
    /** `index` is valid and in this table. */
    virtual QVariant cellData(const QModelIndex &index, int role) const = 0;
    /** Runs `change` (which replaces what rows() and cellData() read) inside a model reset. */
    void resetContents(const std::function<void()> &change);

private:
    QStringList m_titles;
};

} // namespace shardscope::model
