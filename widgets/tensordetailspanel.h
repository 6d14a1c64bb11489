// SPDX-License-Identifier: MIT
#pragma once

#include "model/tensordetails.h"

#include <QWidget>

class QFormLayout;
class QGridLayout;
class QGroupBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QStackedWidget;
class QTableView;

namespace shardscope::model {
class ChunkTableModel;
}

namespace shardscope::widgets {

class HistogramPlot;

/**
 * What is known about the selected entry. For a tensor: key, dtype, shape and the chunk table at
 * once (from the index snapshot), then statistics, SHA-256 and a histogram when the runner
 * delivers them. For an object: its decoded value. For a group: sums over its subtree.
 */
class TensorDetailsPanel : public QWidget
{
    Q_OBJECT

public:
    explicit TensorDetailsPanel(QWidget *parent = nullptr);
    ~TensorDetailsPanel() override;

    /** Back to "nothing selected". */
    void clear();
    /** Shows `index->tensors[tensorIndex]` and waits for setTensorDetails(). */
    void showTensor(model::IndexSnapshot index, int tensorIndex, const QStringList &problems);
    /** Results for the tensor shown; ignored when they are for another key. */
    void setTensorDetails(const model::TensorDetails &details);
    /** Shows an object entry and waits for setObjectDetails(). */
    void showObject(const QString &key, const QString &summary, const QStringList &problems);
    void setObjectDetails(const model::ObjectDetails &details);
    /** Shows a group from its tree index (KeyRole, NumelRole, BytesRole, ...). */
    void showGroup(const QModelIndex &index);

    QString currentKey() const { return m_key; }
    /** Whether the panel waits for details of currentKey(). */
    bool isWaiting() const { return m_waiting; }
    HistogramPlot *histogram() const { return m_histogram; }

private:
    QLabel *addValue(QGridLayout *grid, int row, int column, const QString &name);
    void setTitle(const QString &key, const QString &subtitle);
    void setStatus(const QString &text, bool error = false);
    void setProblems(const QStringList &problems);
    void clearStats();

    QString m_key;
    bool m_waiting = false;

    QLabel *m_title = nullptr;
    QLabel *m_subtitle = nullptr;
    QLabel *m_problems = nullptr;
    QStackedWidget *m_stack = nullptr;

    // tensor page
    QWidget *m_tensorPage = nullptr;
    QLabel *m_status = nullptr;
    QLabel *m_min = nullptr, *m_max = nullptr, *m_mean = nullptr, *m_std = nullptr, *m_l2 = nullptr;
    QLabel *m_count = nullptr, *m_finite = nullptr, *m_nan = nullptr, *m_posInf = nullptr,
           *m_negInf = nullptr;
    QGroupBox *m_histogramBox = nullptr;
    HistogramPlot *m_histogram = nullptr;
    QLineEdit *m_sha256 = nullptr;
    QGroupBox *m_chunksBox = nullptr;
    QTableView *m_chunks = nullptr;
    model::ChunkTableModel *m_chunkModel = nullptr;

    // object page
    QWidget *m_objectPage = nullptr;
    QLabel *m_objectStatus = nullptr;
    QPlainTextEdit *m_objectText = nullptr;

    // group page
    QWidget *m_groupPage = nullptr;
    QFormLayout *m_groupForm = nullptr;
    QLabel *m_groupElements = nullptr, *m_groupSize = nullptr, *m_groupChunks = nullptr,
           *m_groupProblems = nullptr, *m_groupLoad = nullptr;
};

} // namespace shardscope::widgets
