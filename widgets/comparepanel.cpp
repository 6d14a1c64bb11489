// SPDX-License-Identifier: MIT
#include "comparepanel.h"
#include "plaintooltips.h"

#include "columnfit.h"
#include "model/changelistmodel.h"
#include "model/formatting.h"
#include "model/layerfamily.h"
#include "model/valuediffmodel.h"
#include "plotframe.h"
#include "qcustomplotinclude.h"
#include "statusstyle.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTabWidget>
#include <QTreeView>
#include <QVBoxLayout>

#include <cmath>
#include <map>

namespace shardscope::widgets {

using model::ChangeListModel;
using model::ValueDiffModel;

namespace {

class VerdictDelegate : public QStyledItemDelegate
{
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem *option, const QModelIndex &index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        if (index.column() != ValueDiffModel::VerdictColumn)
            return;
        const QString v = index.data(ValueDiffModel::VerdictRole).toString();
        if (v == QStringLiteral("different"))
            applyAttention(option, Attention::Bad);
        else if (v == QStringLiteral("within_tolerance") || v == QStringLiteral("not_compared"))
            applyAttention(option, Attention::Warning);
        else
            applyAttention(option, Attention::Fine);
    }
};

class ChangeDelegate : public QStyledItemDelegate
{
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem *option, const QModelIndex &index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        if (index.column() == ChangeListModel::KindColumn)
            applyAttention(option, index.data(ChangeListModel::ChangedRole).toBool()
                                       ? Attention::Warning
                                       : Attention::Fine);
    }
};

// "Differences only": the rows beyond the tolerance, and those not compared (nothing is known
// of their values either).
class VerdictFilter : public QSortFilterProxyModel
{
public:
    using QSortFilterProxyModel::QSortFilterProxyModel;
    void setDifferentOnly(bool on)
    {
        m_only = on;
        invalidateFilter();
    }

protected:
    bool filterAcceptsRow(int row, const QModelIndex &parent) const override
    {
        const QModelIndex at = sourceModel()->index(row, 0, parent);
        return !m_only || at.data(ValueDiffModel::DifferentRole).toBool() ||
               at.data(ValueDiffModel::VerdictRole).toString() == QStringLiteral("not_compared");
    }

private:
    bool m_only = false;
};

QTreeView *tableView(QWidget *parent)
{
    auto *view = new QTreeView(parent);
    view->setRootIsDecorated(false);
    view->setUniformRowHeights(true);
    view->setAlternatingRowColors(true);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setTextElideMode(Qt::ElideLeft); // names differ at their end: the layer, the parameter
    return view;
}

QDoubleSpinBox *toleranceBox(QWidget *parent, const QString &tip)
{
    auto *box = new QDoubleSpinBox(parent);
    box->setDecimals(9);
    box->setRange(0, 1e6);
    box->setSingleStep(1e-6);
    box->setSpecialValueText(QObject::tr("0 (exact)"));
    box->setToolTip(tip);
    return box;
}

} // namespace

ComparePanel::ComparePanel(QWidget *parent)
    : QWidget(parent)
    , m_changes(new ChangeListModel(this))
    , m_values(new ValueDiffModel(this))
    , m_valuesProxy(new VerdictFilter(this))
    , m_against(new QLabel(tr("No second checkpoint."), this))
    , m_summary(new QLabel(this))
    , m_choose(new QPushButton(tr("Compare &With…"), this))
    , m_compareValues(new QPushButton(tr("Compare &Values"), this))
    , m_show(new QComboBox(this))
    , m_tabs(new QTabWidget(this))
    , m_changeView(tableView(this))
    , m_valueView(tableView(this))
    , m_histogram(new PlotFrame(this))
    , m_layers(new PlotFrame(this))
{
    m_rtol = toleranceBox(this, tr("Relative tolerance: |a − b| ≤ atol + rtol·|b|"));
    m_atol = toleranceBox(this, tr("Absolute tolerance"));
    connect(m_choose, &QPushButton::clicked, this, &ComparePanel::chooseRequested);
    m_compareValues->setToolTip(tr("Read both checkpoints through the layout's rules and "
                                   "compare every tensor (Tools ▸ Compare Values, Ctrl+Shift+V)"));
    m_compareValues->setEnabled(false);
    connect(m_compareValues, &QPushButton::clicked, this, &ComparePanel::compareValues);
    m_summary->setObjectName(QStringLiteral("valuesSummary"));
    m_against->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_against->setTextFormat(Qt::PlainText); // may quote the file
    m_show->addItem(tr("All tensors"));
    m_show->addItem(tr("Beyond tolerance or not compared"));
    connect(m_show, &QComboBox::currentIndexChanged, this, [this](int i) {
        static_cast<VerdictFilter *>(m_valuesProxy)->setDifferentOnly(i == 1);
    });

    auto *controls = new QHBoxLayout;
    controls->addWidget(m_choose);
    controls->addWidget(m_against, 1);
    controls->addWidget(new QLabel(tr("rtol"), this));
    controls->addWidget(m_rtol);
    controls->addWidget(new QLabel(tr("atol"), this));
    controls->addWidget(m_atol);
    controls->addWidget(m_compareValues);

    m_valuesProxy->setSourceModel(m_values);
    m_valuesProxy->setSortRole(ValueDiffModel::SortRole);
    m_valueView->setModel(m_valuesProxy);
    installPlainToolTips(m_valueView);
    m_valueView->setSortingEnabled(true);
    m_valueView->sortByColumn(-1, Qt::AscendingOrder); // the model's: worst first
    m_valueView->setItemDelegate(new VerdictDelegate(m_valueView));
    fitColumnsToContents(m_valueView, 0.35);
    connect(m_valueView->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex &current) {
                if (!current.isValid())
                    return;
                showTensor(current.data(ValueDiffModel::TensorRole).toInt());
                Q_EMIT keySelected(current.data(ValueDiffModel::StoredKeyRole).toString());
            });
    m_changeView->setModel(m_changes);
    installPlainToolTips(m_changeView);
    m_changeView->setItemDelegate(new ChangeDelegate(m_changeView));
    fitColumnsToContents(m_changeView, 0.4);
    connect(m_changeView->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex &current) {
                const QString first = current.data(ChangeListModel::FirstKeyRole).toString();
                if (!first.isEmpty())
                    Q_EMIT keySelected(first);
            });

    auto *valuesPage = new QWidget(this);
    auto *valuesLayout = new QVBoxLayout(valuesPage);
    valuesLayout->setContentsMargins(0, 0, 0, 0);
    auto *valuesBar = new QHBoxLayout;
    valuesBar->addWidget(m_summary, 1);
    valuesBar->addWidget(m_show);
    valuesLayout->addLayout(valuesBar);
    valuesLayout->addWidget(m_valueView, 1);
    m_tabs->setDocumentMode(true);
    m_tabs->addTab(m_changeView, tr("Structure"));
    m_tabs->addTab(valuesPage, tr("Values"));

    // The plots: |a − b| of the selected pair, binned by powers of two; and its family's relative
    // L2 difference per layer.
    // Counts on a log scale, and the equal pairs as a grey bar of their own at the left: one
    // differing element among a million equal ones is one short bar beside a tall grey one,
    // never a full-height bar alone.
    QCustomPlot *h = m_histogram->plot();
    auto *bars = new QCPBars(h->xAxis, h->yAxis);
    bars->setPen(Qt::NoPen);
    bars->setBrush(QColor(0x3d, 0x7e, 0xc4));
    bars->setWidth(0.9);
    bars->setBaseValue(0.5);
    auto *equal = new QCPBars(h->xAxis, h->yAxis);
    equal->setPen(Qt::NoPen);
    equal->setBrush(QColor(0x9a, 0x9a, 0x9a));
    equal->setWidth(0.9);
    equal->setBaseValue(0.5);
    h->xAxis->setLabel(tr("log₂ |a − b|"));
    h->yAxis->setLabel(tr("elements (log scale)"));
    h->yAxis->setScaleType(QCPAxis::stLogarithmic);
    h->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    h->yAxis->setNumberFormat(QStringLiteral("gb"));
    m_histogram->setHoverText([](int plottable, int, double key, double value) {
        if (plottable == 1)
            return QObject::tr("equal pairs: %1").arg(model::formatCount(uint64_t(value)));
        return QObject::tr("|a − b| in [2^%1, 2^%2): %3")
            .arg(key)
            .arg(key + 1)
            .arg(model::countOf(uint64_t(value), "element", "elements"));
    });
    QCustomPlot *l = m_layers->plot();
    m_layers->addLayerSeries();
    l->yAxis->setLabel(tr("relative L2 difference"));
    m_layers->setHoverText([](int, int, double key, double value) {
        return QObject::tr("layer %1: relative L2 %2").arg(key).arg(value, 0, 'g', 4);
    });
    connect(m_layers, &PlotFrame::pointClicked, this, [this](int p, int index) {
        if (p == 0 && index >= 0 && size_t(index) < m_layerTensors.size())
            selectTensor(m_layerTensors[size_t(index)]);
    });

    auto *plots = new QSplitter(Qt::Vertical, this);
    plots->addWidget(m_histogram);
    plots->addWidget(m_layers);
    auto *split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_tabs);
    split->addWidget(plots);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setSizes({600, 400});

    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(controls);
    layout->addWidget(split, 1);
    updateSummary();
}

void ComparePanel::setComparePath(const QString &path)
{
    m_against->setText(path.isEmpty() ? tr("No second checkpoint.") : tr("Against %1").arg(path));
    m_against->setToolTip(path);
    m_compareValues->setEnabled(!path.isEmpty());
}

void ComparePanel::setComparison(const model::CompareSnapshot &diff)
{
    m_changes->setComparison(diff);
    m_tabs->setTabText(
        0, diff ? tr("Structure: %1 same, %2 changes")
                      .arg(model::formatCount(diff->same), model::formatCount(diff->changes.size()))
                : tr("Structure"));
}

void ComparePanel::setValues(const model::ValuesSnapshot &values)
{
    m_values->setValues(values);
    updateSummary();
    if (values) {
        m_tabs->setCurrentIndex(1);
        // The worst compared tensor's plots; the list stays at its top, where the tensors not
        // compared are.
        int row = 0;
        while (row + 1 < m_valuesProxy->rowCount() &&
               m_valuesProxy->index(row, 0).data(ValueDiffModel::VerdictRole).toString() ==
                   QStringLiteral("not_compared"))
            ++row;
        if (m_valuesProxy->rowCount() > 0) {
            m_valueView->setCurrentIndex(m_valuesProxy->index(row, 0));
            m_valueView->scrollToTop();
        }
    } else {
        showTensor(-1);
    }
}

shardscope::ValueDiffRequest ComparePanel::valueRequest() const
{
    ValueDiffRequest r;
    r.rtol = m_rtol->value();
    r.atol = m_atol->value();
    return r;
}

void ComparePanel::selectTensor(int tensor)
{
    const int row = m_values->rowOfTensor(tensor);
    const QModelIndex at = m_valuesProxy->mapFromSource(m_values->index(row, 0));
    if (row < 0 || !at.isValid())
        return;
    m_valueView->setCurrentIndex(at);
    m_valueView->scrollTo(at);
}

void ComparePanel::updateSummary()
{
    const model::ValuesSnapshot &v = m_values->values();
    if (!v) {
        m_summary->setText(tr("Values not compared yet: Compare Values reads both checkpoints."));
        return;
    }
    using Verdict = TensorValueDiff::Verdict;
    const size_t notCompared = v->count(Verdict::NotCompared);
    if (notCompared == 0) {
        m_summary->setText(tr("%1 different · %2 within tolerance · %3 identical · all %4 "
                              "compared · %5 read")
                               .arg(model::formatCount(v->count(Verdict::Different)),
                                    model::formatCount(v->count(Verdict::Within)),
                                    model::formatCount(v->count(Verdict::Identical)),
                                    model::formatCount(v->tensors.size()),
                                    model::formatBytes(v->bytesRead)));
        return;
    }
    // Incomplete: nothing here may read as a verdict on every tensor ("0 different").
    const QString incomplete =
        tr("Incomplete: %1 of %2 tensors not compared (listed first)")
            .arg(model::formatCount(notCompared), model::formatCount(v->tensors.size()));
    const size_t different = v->count(Verdict::Different);
    const size_t comparedCount = v->tensors.size() - notCompared;
    const QString compared = model::formatCount(comparedCount);
    m_summary->setText(QStringLiteral("%1 · %2 · %3")
                           .arg(incomplete,
                                different ? tr("%1 different among the %2 compared")
                                                .arg(model::formatCount(different), compared)
                                : comparedCount
                                    ? tr("the %1 compared are within the tolerance").arg(compared)
                                    : tr("none compared"),
                                tr("%1 read").arg(model::formatBytes(v->bytesRead))));
}

void ComparePanel::showTensor(int tensor)
{
    QCustomPlot *h = m_histogram->plot();
    QCustomPlot *l = m_layers->plot();
    auto *bars = static_cast<QCPBars *>(h->plottable(0));
    auto *equal = static_cast<QCPBars *>(h->plottable(1));
    bars->data()->clear();
    equal->data()->clear();
    l->graph(0)->data()->clear();
    l->graph(1)->data()->clear();
    m_layerTensors.clear();
    const model::ValuesSnapshot &v = m_values->values();
    if (!v || tensor < 0 || size_t(tensor) >= v->tensors.size()) {
        h->replot();
        l->replot();
        return;
    }
    const TensorValueDiff &t = v->tensors[size_t(tensor)];
    if (t.verdict == TensorValueDiff::Verdict::NotCompared) {
        // Nothing was read: no pairs, equal or not.
        h->xAxis->setLabel(tr("not compared: %1").arg(QString::fromStdString(t.why)));
        h->xAxis->setRange(-1, 1);
        h->yAxis->setRange(0.5, 10);
        h->replot();
    } else {
        // [0]: equal pairs; [k]: |a − b| in [2^(k − 41), 2^(k − 40)).
        double lowest = 0;
        bool any = false;
        for (size_t k = 1; k < t.histogram.size(); ++k)
            if (t.histogram[k] > 0) {
                bars->addData(double(k) - 41.0, double(t.histogram[k]));
                lowest = any ? std::min(lowest, double(k) - 41.0) : double(k) - 41.0;
                any = true;
            }
        const int64_t equalPairs = t.histogram.empty() ? t.count - t.differing : t.histogram[0];
        if (equalPairs > 0)
            equal->addData(any ? lowest - 2 : 0, double(equalPairs));
        h->xAxis->setLabel(
            t.differing
                ? tr("log₂ |a − b| · %1 of %2 differ (grey: equal pairs)")
                      .arg(model::formatCount(uint64_t(t.differing)),
                           model::countOf(uint64_t(t.count), "pair", "pairs"))
                : tr("all %1 equal").arg(model::countOf(uint64_t(t.count), "pair", "pairs")));
        h->rescaleAxes();
        h->xAxis->scaleRange(1.3);
        h->yAxis->setRangeLower(0.5);
        h->yAxis->setRangeUpper(std::max(2.0, h->yAxis->range().upper * 2));
        h->replot();
    }

    // The family across layers, in layer order.
    const model::LayerKey key = model::layerKey(QString::fromStdString(t.name));
    if (!key.family.isEmpty()) {
        std::map<int, int> byLayer;
        for (size_t i = 0; i < v->tensors.size(); ++i) {
            const TensorValueDiff &o = v->tensors[i];
            if (o.verdict == TensorValueDiff::Verdict::NotCompared)
                continue;
            const model::LayerKey k = model::layerKey(QString::fromStdString(o.name));
            if (k.family == key.family)
                byLayer.emplace(k.layer, int(i));
        }
        for (const auto &[layer, i] : byLayer) {
            l->graph(0)->addData(layer, v->tensors[size_t(i)].relL2);
            m_layerTensors.push_back(i);
        }
        l->graph(1)->addData(key.layer, t.relL2);
        l->xAxis->setLabel(tr("layer of %1").arg(key.family));
    } else {
        l->xAxis->setLabel(tr("layer (the selected tensor has none)"));
    }
    l->rescaleAxes();
    l->xAxis->scaleRange(1.1);
    l->yAxis->setRangeLower(0);
    if (l->yAxis->range().upper <= 0)
        l->yAxis->setRangeUpper(1);
    l->replot();
}

void ComparePanel::compareValues()
{
    Q_EMIT valuesRequested(valueRequest());
}

void ComparePanel::jobStarted()
{
    m_compareValues->setEnabled(false);
    m_summary->setText(tr("Comparing values…"));
}

void ComparePanel::jobEnded(bool ok, const QString &message)
{
    m_compareValues->setEnabled(true);
    if (!ok)
        m_summary->setText(tr("Value comparison: %1").arg(message));
    else
        updateSummary();
}

} // namespace shardscope::widgets
