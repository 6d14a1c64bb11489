// SPDX-License-Identifier: MIT
// The panels on their own: what their controls ask for, and plots that fill and save.
#include "model/valuediffmodel.h"
#include "widgets/comparepanel.h"
#include "widgets/darkstyle.h"
#include "widgets/layoutoptionsdialog.h"
#include "widgets/plaintooltips.h"
#include "widgets/plotframe.h"
#include "widgets/verifypanel.h"

#include "widgets/qcustomplotinclude.h"

#include <QAbstractItemModelTester>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStyle>
#include <QStyleOptionButton>
#include <QTemporaryDir>
#include <QToolTip>
#include <QTreeView>

#include <gtest/gtest.h>

using namespace shardscope;
using namespace shardscope::widgets;

TEST(VerifyPanelTest, RunAsksForWhatTheControlsSay)
{
    VerifyPanel panel;
    panel.setReady(true);
    const VerifyRequest defaults = panel.request();
    EXPECT_EQ(defaults.tp, 0); // the layout's
    EXPECT_EQ(defaults.firstStageLayers, -1);
    EXPECT_EQ(defaults.maxMemory, 0u);

    panel.findChild<QSpinBox *>(QStringLiteral("tp"))->setValue(2);
    panel.findChild<QSpinBox *>(QStringLiteral("ep"))->setValue(4);
    panel.findChild<QSpinBox *>(QStringLiteral("lastStageLayers"))->setValue(3);
    panel.findChild<QSpinBox *>(QStringLiteral("memory"))->setValue(64);
    panel.findChild<QSpinBox *>(QStringLiteral("threads"))->setValue(3);
    panel.findChild<QCheckBox *>(QStringLiteral("hash"))->setChecked(true);
    QSignalSpy run(&panel, &VerifyPanel::runRequested);
    auto *button = panel.findChild<QPushButton *>(QStringLiteral("run"));
    ASSERT_TRUE(button->isEnabled());
    button->click();
    ASSERT_EQ(run.size(), 1);
    const auto r = run.first().first().value<VerifyRequest>();
    EXPECT_EQ(r.tp, 2);
    EXPECT_EQ(r.ep, 4);
    EXPECT_EQ(r.pp, 0);
    EXPECT_EQ(r.lastStageLayers, 3);
    EXPECT_EQ(r.maxMemory, uint64_t(64) << 20);
    EXPECT_EQ(r.threads, 3);
    EXPECT_TRUE(r.hash);

    // While a job runs, Run waits for it.
    panel.jobStarted();
    EXPECT_FALSE(button->isEnabled());
    panel.jobEnded(false, QStringLiteral("Cancelled"));
    EXPECT_TRUE(button->isEnabled());
}

TEST(PlotFrameTest, SavesPngAndPdf)
{
    PlotFrame frame;
    frame.resize(400, 300);
    QCPGraph *g = frame.plot()->addGraph();
    for (int i = 0; i < 10; ++i)
        g->addData(i, i * i);
    frame.resetZoom();
    QTemporaryDir dir;
    const QString png = dir.filePath(QStringLiteral("plot.png"));
    const QString pdf = dir.filePath(QStringLiteral("plot.pdf"));
    ASSERT_TRUE(frame.save(png));
    ASSERT_TRUE(frame.save(pdf));
    QFile a(png), b(pdf);
    ASSERT_TRUE(a.open(QIODevice::ReadOnly));
    ASSERT_TRUE(b.open(QIODevice::ReadOnly));
    EXPECT_TRUE(a.read(4) == QByteArray("\x89PNG"));
    EXPECT_TRUE(b.read(4) == QByteArray("%PDF"));
}

// A family across layers becomes one point per layer, the selected one marked; the histogram
// one bar per occupied power-of-two bin.
TEST(ComparePanelTest, PlotsTheSelectedFamilyAcrossLayers)
{
    auto values = std::make_shared<ValueDiffResult>();
    for (int layer : {2, 0, 1}) {
        TensorValueDiff t;
        t.name = "decoder.layers." + std::to_string(layer) + ".mlp.linear_fc1.weight";
        t.verdict =
            layer == 1 ? TensorValueDiff::Verdict::Different : TensorValueDiff::Verdict::Identical;
        t.count = 100;
        t.differing = layer == 1 ? 3 : 0;
        t.relL2 = layer == 1 ? 0.25 : 0;
        t.histogram.assign(82, 0);
        t.histogram[0] = t.count - t.differing;
        if (layer == 1) {
            t.histogram[30] = 2;
            t.histogram[35] = 1;
        }
        values->tensors.push_back(t);
    }
    TensorValueDiff other;
    other.name = "output_layer.weight";
    other.verdict = TensorValueDiff::Verdict::NotCompared;
    other.why = "the second checkpoint lacks it";
    values->tensors.push_back(other);

    ComparePanel panel;
    QAbstractItemModelTester tester(panel.valuesModel(),
                                    QAbstractItemModelTester::FailureReportingMode::Fatal);
    panel.setComparePath(QStringLiteral("/b"));
    panel.setValues(values);
    // The uncompared first, then worst first: the differing layer, then the identical ones.
    model::ValueDiffModel *m = panel.valuesModel();
    EXPECT_EQ(m->index(0, 0).data(model::ValueDiffModel::VerdictRole).toString(),
              QStringLiteral("not_compared"));
    EXPECT_EQ(m->index(1, 0).data().toString(),
              QStringLiteral("decoder.layers.1.mlp.linear_fc1.weight"));
    // setValues selected the worst compared tensor: its histogram and its family. Three of a
    // hundred pairs differ: two bars of them on a log scale beside a grey bar of the 97 equal
    // pairs, never bars of full height alone.
    QCustomPlot *h = panel.histogramPlot()->plot();
    EXPECT_EQ(h->plottable(0)->interface1D()->dataCount(), 2);
    ASSERT_EQ(h->plottable(1)->interface1D()->dataCount(), 1);
    EXPECT_EQ(h->plottable(1)->interface1D()->dataMainValue(0), 97.0);
    EXPECT_EQ(h->yAxis->scaleType(), QCPAxis::stLogarithmic);
    EXPECT_TRUE(h->xAxis->label().contains(QStringLiteral("3 of 100 pairs differ")))
        << h->xAxis->label().toStdString();
    QCustomPlot *layers = panel.layerPlot()->plot();
    ASSERT_EQ(layers->graph(0)->dataCount(), 3);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(layers->graph(0)->dataMainKey(i), double(i));
    ASSERT_EQ(layers->graph(1)->dataCount(), 1);
    EXPECT_EQ(layers->graph(1)->dataMainKey(0), 1.0);
    EXPECT_EQ(layers->graph(1)->dataMainValue(0), 0.25);
    panel.selectTensor(1); // layer 0
    EXPECT_EQ(layers->graph(1)->dataMainKey(0), 0.0);
    // A tensor not compared has no pairs at all: it says why, never "all 0 pairs equal".
    panel.selectTensor(3);
    EXPECT_EQ(h->plottable(0)->interface1D()->dataCount(), 0);
    EXPECT_EQ(h->plottable(1)->interface1D()->dataCount(), 0);
    EXPECT_EQ(h->xAxis->label(), QStringLiteral("not compared: the second checkpoint lacks it"));
}

// A comparison that could not compare every tensor is no all-clear: those tensors come first,
// are counted, stay under "beyond tolerance or not compared", and the summary says it is
// incomplete instead of "0 different".
TEST(ComparePanelTest, NotComparedComeFirstAndMakeTheSummaryIncomplete)
{
    auto values = std::make_shared<ValueDiffResult>();
    for (int i = 0; i < 3; ++i) {
        TensorValueDiff t;
        t.name = "decoder.layers." + std::to_string(i) + ".w";
        t.verdict = TensorValueDiff::Verdict::Identical;
        t.count = 4;
        values->tensors.push_back(t);
    }
    TensorValueDiff lost;
    lost.name = "decoder.layers.3.w";
    lost.verdict = TensorValueDiff::Verdict::NotCompared;
    lost.why = "second checkpoint: not found";
    values->tensors.push_back(lost);

    ComparePanel panel;
    QAbstractItemModelTester tester(panel.valuesModel(),
                                    QAbstractItemModelTester::FailureReportingMode::Fatal);
    panel.setComparePath(QStringLiteral("/b"));
    panel.setValues(values);
    model::ValueDiffModel *m = panel.valuesModel();
    EXPECT_EQ(m->index(0, 0).data().toString(), QStringLiteral("decoder.layers.3.w"));
    EXPECT_TRUE(m->index(0, model::ValueDiffModel::VerdictColumn)
                    .data()
                    .toString()
                    .contains(QStringLiteral("second checkpoint: not found")));
    auto *summary = panel.findChild<QLabel *>(QStringLiteral("valuesSummary"));
    ASSERT_NE(summary, nullptr);
    const QString text = summary->text();
    EXPECT_TRUE(text.startsWith(QStringLiteral("Incomplete: 1 of 4 tensors not compared")))
        << text.toStdString();
    EXPECT_FALSE(text.contains(QStringLiteral("0 different"))) << text.toStdString();
    EXPECT_FALSE(text.contains(QStringLiteral("identical"))) << text.toStdString();
    // The view shows the filter's rows: "beyond tolerance or not compared" keeps this one.
    auto *show = panel.findChild<QComboBox *>();
    ASSERT_NE(show, nullptr);
    show->setCurrentIndex(1);
    QTreeView *view = nullptr;
    for (QTreeView *v : panel.findChildren<QTreeView *>())
        if (auto *proxy = qobject_cast<QSortFilterProxyModel *>(v->model()))
            if (proxy->sourceModel() == m)
                view = v;
    ASSERT_NE(view, nullptr);
    ASSERT_EQ(view->model()->rowCount(), 1);
    EXPECT_EQ(view->model()->index(0, 0).data().toString(), QStringLiteral("decoder.layers.3.w"));

    // Every tensor compared: the counts are the verdict.
    values->tensors.pop_back();
    panel.setValues(values);
    EXPECT_TRUE(summary->text().startsWith(QStringLiteral("0 different")))
        << summary->text().toStdString();
    EXPECT_TRUE(summary->text().contains(QStringLiteral("all 3 compared")));
}

// The dialog gives back what it was given, and what its controls say.
TEST(LayoutOptionsDialogTest, RoundTripsTheCliOptions)
{
    LayoutOptions o;
    o.parallelGiven = true;
    o.parallel.tp = 2;
    o.parallel.ep = 4;
    o.parallel.lastStageLayers = 3;
    o.megatronVersion = "0.16";
    o.sequentialExperts = true;
    o.mlaDownProjFusion = false;
    LayoutOptionsDialog dialog(QStringLiteral("/x/config.json"));
    dialog.setOptions(o);
    const LayoutOptions back = dialog.options();
    EXPECT_TRUE(back.parallelGiven);
    EXPECT_EQ(back.parallel.tp, 2);
    EXPECT_EQ(back.parallel.ep, 4);
    EXPECT_EQ(back.parallel.pp, 1);
    EXPECT_EQ(back.parallel.lastStageLayers, 3);
    EXPECT_EQ(back.megatronVersion, "0.16");
    EXPECT_TRUE(back.sequentialExperts);
    EXPECT_EQ(back.mlaDownProjFusion, std::optional<bool>(false));

    // Sizes not ticked: the config's own, whatever the boxes say.
    dialog.setOptions({});
    const LayoutOptions defaults = dialog.options();
    EXPECT_FALSE(defaults.parallelGiven);
    EXPECT_EQ(defaults.megatronVersion, "main");
    EXPECT_FALSE(defaults.mlaDownProjFusion.has_value());
}

// A key that begins like markup is shown as text in its tooltip, never rendered.
TEST(PlainToolTips, KeysAreNeverMarkup)
{
    QStandardItemModel model;
    auto *item = new QStandardItem(QStringLiteral("key"));
    const QString hostile = QStringLiteral("<img src=x><b>model.weight</b>\nsecond line");
    item->setToolTip(hostile);
    model.appendRow(item);
    QTreeView view;
    view.setModel(&model);
    installPlainToolTips(&view);
    view.resize(400, 200);
    view.show();
    const QRect rect = view.visualRect(model.index(0, 0));
    QHelpEvent help(QEvent::ToolTip, rect.center(), view.viewport()->mapToGlobal(rect.center()));
    QCoreApplication::sendEvent(view.viewport(), &help);
    const QString shown = QToolTip::text();
    EXPECT_TRUE(shown.contains(QStringLiteral("&lt;img src=x&gt;&lt;b&gt;model.weight&lt;/b&gt;")))
        << shown.toStdString();
    EXPECT_FALSE(shown.contains(QStringLiteral("<img")));
    EXPECT_TRUE(shown.contains(QStringLiteral("<br>second line")));
    QToolTip::hideText();
}

// Under --dark an unchecked check box is outlined in a colour that reads on the dark window
// (Fusion's own outline is a shade darker than it: near black on dark grey).
TEST(DarkStyleTest, UncheckedBoxesStandOut)
{
    std::unique_ptr<QStyle> style(createDarkStyle());
    QWidget window;
    window.setStyle(style.get());
    window.setPalette(darkPalette());
    window.setAutoFillBackground(true);
    auto *box = new QCheckBox(QStringLiteral("Problems only"), &window);
    box->setStyle(style.get());
    box->setPalette(darkPalette());
    box->adjustSize();
    window.resize(box->width() + 20, box->height() + 20);
    box->move(10, 10);
    window.show();
    const QImage image = window.grab().toImage();
    QStyleOptionButton option;
    option.initFrom(box);
    const QRect indicator =
        style->subElementRect(QStyle::SE_CheckBoxIndicator, &option, box).translated(box->pos());
    ASSERT_TRUE(indicator.isValid());
    const int background = darkPalette().color(QPalette::Window).lightness();
    int brightest = 0; // along the indicator's outline
    for (int x = indicator.left(); x <= indicator.right(); ++x)
        for (int y : {indicator.top(), indicator.bottom()})
            brightest = std::max(brightest, QColor(image.pixel(x, y)).lightness());
    EXPECT_GE(brightest - background, 50) << "outline " << brightest << " on " << background;
}
