// SPDX-License-Identifier: MIT
#pragma once

#include "model/snapshots.h"

#include <QWidget>

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QSortFilterProxyModel;
class QTabWidget;
class QTreeView;

namespace shardscope::model {
class ChangeListModel;
class ValueDiffModel;
} // namespace shardscope::model

namespace shardscope::widgets {

class PlotFrame;

/**
 * Two checkpoints side by side: their structure (keys added, removed, renamed by a rule,
 * reshaped or recast) and, once asked for, their values, worst differences first; for the
 * selected pair, a histogram of |a − b| and, across the model's layers, the relative L2
 * difference of its family, so that the layer where two runs part stands out.
 */
class ComparePanel : public QWidget
{
    Q_OBJECT

public:
    explicit ComparePanel(QWidget *parent = nullptr);

    void setComparePath(const QString &path);
    void setComparison(const model::CompareSnapshot &diff);
    void setValues(const model::ValuesSnapshot &values);
    /** The tolerances the controls say. */
    shardscope::ValueDiffRequest valueRequest() const;
    model::ValueDiffModel *valuesModel() const { return m_values; }
    PlotFrame *histogramPlot() const { return m_histogram; }
    PlotFrame *layerPlot() const { return m_layers; }
    /** Selects the values row of tensor `tensor` (an index into the result's tensors). */
    void selectTensor(int tensor);

public Q_SLOTS:
    /** Asks for the values compared with the panel's tolerances (valuesRequested), as its
     *  button does. */
    void compareValues();
    void jobStarted();
    void jobEnded(bool ok, const QString &message);

Q_SIGNALS:
    void chooseRequested();
    void valuesRequested(const shardscope::ValueDiffRequest &request);
    /** A tensor or key was selected; `storedKey`: where this checkpoint stores it. */
    void keySelected(const QString &storedKey);

private:
    void showTensor(int tensor);
    void updateSummary();

    model::ChangeListModel *m_changes;
    model::ValueDiffModel *m_values;
    QSortFilterProxyModel *m_valuesProxy;
    QLabel *m_against, *m_summary;
    QPushButton *m_choose, *m_compareValues;
    QDoubleSpinBox *m_rtol, *m_atol;
    QComboBox *m_show;
    QTabWidget *m_tabs;
    QTreeView *m_changeView, *m_valueView;
    PlotFrame *m_histogram, *m_layers;
    std::vector<int> m_layerTensors; ///< the per-layer plot's points → tensors
};

} // namespace shardscope::widgets
