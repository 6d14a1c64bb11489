// SPDX-License-Identifier: MIT
// The window as a new user reads it, at the sizes people use, light and dark: the load diff
// shows a dozen rows and explains its first problem without scrolling, the controls stay put,
// the rules are listed once, group counts follow the filter, and the layer plot never shows
// another family than the one it names.
#include "mainwindow.h"
#include "testwait.h"

#include "model/checkpointfilterproxy.h"
#include "model/checkpointsession.h"
#include "model/diffchoices.h"
#include "model/difflistmodel.h"
#include "model/formatting.h"
#include "model/layerfamily.h"
#include "model/layerstats.h"
#include "model/loadmarks.h"
#include "model/roles.h"
#include "widgets/checkpointtreeview.h"
#include "widgets/darkstyle.h"
#include "widgets/diffpanel.h"
#include "widgets/layerplot.h"
#include "widgets/plotframe.h"
#include "widgets/qcustomplotinclude.h"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QPalette>
#include <QTextBrowser>
#include <QToolButton>
#include <QTreeView>

#include <gtest/gtest.h>

#include <ostream>
#include <set>

using namespace shardscope;
using namespace shardscope::model;
using shardscope::gui::MainWindow;
using shardscope::tests::waitFor;

namespace {

struct WindowCase
{
    int width, height;
    bool dark;
};

// What ctest lists beside each case's name.
void PrintTo(const WindowCase &c, std::ostream *os)
{
    *os << c.width << "x" << c.height << (c.dark ? " dark" : " light");
}

class ReadabilityTest : public ::testing::TestWithParam<WindowCase>
{
};

// The demo checked against its config with Megatron's MLA handler off under a partial load:
// ten parameters silently kept at their initial values, the rest fine.
void openNegativeControl(MainWindow &w)
{
    const QString demo = QStringLiteral(SHARDSCOPE_TEST_DEMO_DIR);
    DiffOptions options;
    options.disabledRules = {"mla_down_proj"};
    options.strictLoad = false;
    options.strictness = Strictness::IgnoreAll;
    w.setDiffOptions(options);
    w.openPath(demo);
    w.setConfigPath(demo + QStringLiteral("/config.json"));
    CheckpointSession *s = w.session();
    ASSERT_TRUE(waitFor(
        [&] { return s->diff() && !s->isJobRunning() && !s->diff()->outcome.keptAtInit.empty(); }));
}

} // namespace

TEST_P(ReadabilityTest, LoadDiffShowsADozenRowsAndExplainsTheFirstProblem)
{
    const WindowCase c = GetParam();
    const QPalette before = QApplication::palette();
    if (c.dark)
        QApplication::setPalette(widgets::darkPalette()); // what --dark sets
    {
        MainWindow w;
        w.resize(c.width, c.height);
        w.show();
        w.showPanel(QStringLiteral("diff"));
        widgets::DiffPanel *panel = w.diffPanel();
        auto *status = panel->findChild<QComboBox *>(QStringLiteral("statusFilter"));
        ASSERT_NE(status, nullptr);
        QCoreApplication::processEvents();
        const int controlsY = status->mapTo(panel, QPoint(0, 0)).y();

        openNegativeControl(w);
        QCoreApplication::processEvents();
        // The banner came with three lines of text; the controls stayed where they were.
        EXPECT_EQ(status->mapTo(panel, QPoint(0, 0)).y(), controlsY);

        auto *view = panel->findChild<QTreeView *>(QStringLiteral("entries"));
        ASSERT_NE(view, nullptr);
        ASSERT_GT(view->model()->rowCount(), 12);
        const int rowHeight = view->sizeHintForRow(0);
        ASSERT_GT(rowHeight, 0);
        EXPECT_GE(view->viewport()->height() / rowHeight, 12)
            << "viewport " << view->viewport()->height() << " px, rows " << rowHeight << " px";

        // The reason starts on screen, right after the status and the load's verdict.
        QHeaderView *h = view->header();
        const int reasonAt = h->sectionViewportPosition(DiffListModel::ReasonColumn);
        EXPECT_GE(reasonAt, 0);
        EXPECT_LT(reasonAt + 40, view->viewport()->width());
        EXPECT_LT(h->visualIndex(DiffListModel::ReasonColumn),
                  h->visualIndex(DiffListModel::StoredColumn));
        // The name column is as wide as its keys (up to a share of the table).
        EXPECT_GE(h->sectionSize(DiffListModel::NameColumn),
                  std::min(view->fontMetrics().horizontalAdvance(QStringLiteral(
                               "decoder.layers.0.self_attention.linear_proj.weight")),
                           int(view->viewport()->width() * 0.4) - 8));

        // The first problem's full key, reason and fix are in the details pane, wrapped, before
        // anything is selected; selecting nothing left F8 its first stop.
        auto *details = panel->findChild<QTextBrowser *>(QStringLiteral("entryDetails"));
        ASSERT_NE(details, nullptr);
        QModelIndex first;
        for (int r = 0; r < view->model()->rowCount() && !first.isValid(); ++r)
            if (view->model()->index(r, 0).data(DiffListModel::KeptAtInitRole).toBool())
                first = view->model()->index(r, 0);
        ASSERT_TRUE(first.isValid());
        const QString text = details->toPlainText();
        EXPECT_TRUE(text.contains(first.data(Qt::ToolTipRole).toString())) << text.toStdString();
        EXPECT_TRUE(text.contains(
            first.siblingAtColumn(DiffListModel::ReasonColumn).data().toString().left(40)))
            << text.toStdString();
        const QString fix = first.data(DiffListModel::FixRole).toString();
        EXPECT_FALSE(fix.isEmpty());
        EXPECT_TRUE(text.contains(fix.left(40))) << text.toStdString();
        EXPECT_FALSE(view->currentIndex().isValid());
        EXPECT_TRUE(panel->gotoProblem(true));
        EXPECT_EQ(view->currentIndex().row(), first.row());
        // Full keys on hover.
        EXPECT_EQ(first.data(Qt::ToolTipRole).toString(), first.data().toString());
    }
    QApplication::setPalette(before);
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReadabilityTest,
                         ::testing::Values(WindowCase{1440, 900, false},
                                           WindowCase{1440, 900, true},
                                           WindowCase{1920, 1080, false},
                                           WindowCase{1920, 1080, true}),
                         [](const ::testing::TestParamInfo<WindowCase> &i) {
                             return std::to_string(i.param.width) + "x" +
                                    std::to_string(i.param.height) +
                                    (i.param.dark ? "_dark" : "_light");
                         });

TEST(RulesMenuTest, ListsEachRuleOnce)
{
    widgets::DiffPanel panel;
    auto *rules = panel.findChild<QToolButton *>(QStringLiteral("rules"));
    ASSERT_NE(rules, nullptr);
    std::multiset<QString> names;
    for (const QAction *a : rules->menu()->actions())
        names.insert(a->text());
    const QList<RuleChoice> all = diffRules();
    EXPECT_EQ(names.size(), size_t(all.size()));
    for (const RuleChoice &r : all)
        EXPECT_EQ(names.count(r.name), 1u) << r.name.toStdString();
}

// Under a filter a group counts its matches in every column: "1 of 12 entries" and the Load
// column's count of the worst mark among those matches, not among all twelve.
TEST(FilteredGroupsTest, LoadColumnCountsTheMatches)
{
    MainWindow w;
    w.resize(1440, 900);
    w.show();
    openNegativeControl(w);
    auto *tree = w.findChild<widgets::CheckpointTreeView *>();
    ASSERT_NE(tree, nullptr);
    auto *proxy = qobject_cast<CheckpointFilterProxy *>(tree->model());
    ASSERT_NE(proxy, nullptr);
    // One layer's fused MLA projection (kept at init) and its neighbours: the group of layer 0
    // matches a few of its entries.
    proxy->setFilterText(QStringLiteral("*layers.0.self_attention.linear_q*"));
    ASSERT_TRUE(waitFor([&] { return proxy->rowCount() > 0; }));
    int groups = 0;
    std::function<void(const QModelIndex &)> walk = [&](const QModelIndex &parent) {
        for (int r = 0; r < proxy->rowCount(parent); ++r) {
            const QModelIndex i = proxy->index(r, NameColumn, parent);
            if (NodeKind(i.data(KindRole).toInt()) != NodeKind::Group) {
                continue;
            }
            ++groups;
            const quint64 matches = i.data(LeafCountRole).toULongLong();
            const quint64 marked = i.data(LoadMarkCountRole).toULongLong();
            const auto mark = LoadMark(i.data(LoadMarkRole).toInt());
            EXPECT_GT(matches, 0u);
            EXPECT_LE(marked, matches) << i.data(KeyRole).toString().toStdString();
            // The worst mark among the matching leaves, counted among them.
            quint64 worst = 0, counted = 0;
            std::function<void(const QModelIndex &)> leaves = [&](const QModelIndex &g) {
                for (int k = 0; k < proxy->rowCount(g); ++k) {
                    const QModelIndex c = proxy->index(k, NameColumn, g);
                    if (NodeKind(c.data(KindRole).toInt()) == NodeKind::Group) {
                        leaves(c);
                        continue;
                    }
                    const quint64 m = quint64(c.data(LoadMarkRole).toInt());
                    if (m > worst) {
                        worst = m;
                        counted = 0;
                    }
                    counted += m == worst;
                }
            };
            leaves(i);
            EXPECT_EQ(quint64(mark), worst) << i.data(KeyRole).toString().toStdString();
            EXPECT_EQ(marked, counted) << i.data(KeyRole).toString().toStdString();
            EXPECT_EQ(i.siblingAtColumn(LoadColumn).data().toString(), groupLoadText(mark, marked));
            // Sorting by the Load column sorts by what it shows.
            EXPECT_EQ(i.siblingAtColumn(LoadColumn).data(SortRole).toUInt(), uint(mark));
            walk(i);
        }
    };
    walk({});
    EXPECT_GT(groups, 0);
}

// The caption, the plot and its axis name one family: the selected tensor's once plotted,
// never the previous one's; layers are ticked at whole numbers.
TEST(LayerPlotTest, ShowsOnlyTheFamilyItNames)
{
    widgets::LayerPlot plot;
    const QString fc1 = QStringLiteral("decoder.layers.%1.mlp.linear_fc1.weight");
    const QString proj = QStringLiteral("decoder.layers.%1.self_attention.linear_proj.weight");
    plot.setKey(fc1.arg(1));
    auto stats = std::make_shared<LayerStats>();
    stats->family = layerKey(fc1.arg(1)).family;
    for (int l = 0; l < 3; ++l) {
        stats->layers.push_back(l);
        stats->keys.push_back(fc1.arg(l));
        TensorHealth h;
        h.l2 = 1.0 + l;
        stats->health.push_back(h);
    }
    plot.setStats(stats);
    QCustomPlot *p = plot.frame()->plot();
    EXPECT_EQ(plot.plottedFamily(), stats->family);
    EXPECT_EQ(p->graph(0)->dataCount(), 3);
    EXPECT_TRUE(p->xAxis->label().contains(stats->family));
    auto ticker = p->xAxis->ticker().dynamicCast<QCPAxisTickerFixed>();
    ASSERT_FALSE(ticker.isNull());
    EXPECT_EQ(ticker->tickStep(), 1.0);
    EXPECT_EQ(ticker->scaleStrategy(), QCPAxisTickerFixed::ssMultiples);

    // Another family selected: nothing of the old one is left on screen.
    plot.setKey(proj.arg(2));
    const QString other = layerKey(proj.arg(2)).family;
    EXPECT_TRUE(plot.plottedFamily().isEmpty());
    EXPECT_EQ(p->graph(0)->dataCount(), 0);
    EXPECT_FALSE(p->xAxis->label().contains(stats->family));
    EXPECT_TRUE(plot.caption().contains(other));
    EXPECT_FALSE(plot.caption().contains(stats->family));
    // The old family's statistics arriving late are not shown under the new caption.
    plot.setStats(stats);
    EXPECT_TRUE(plot.plottedFamily().isEmpty());
    EXPECT_EQ(p->graph(0)->dataCount(), 0);

    // One layer is one layer, not "1 layers".
    auto one = std::make_shared<LayerStats>(*stats);
    one->layers.resize(1);
    one->keys = one->keys.mid(0, 1);
    one->health.resize(1);
    plot.setKey(fc1.arg(0));
    plot.setStats(one);
    EXPECT_TRUE(plot.caption().endsWith(QStringLiteral(": 1 layer")))
        << plot.caption().toStdString();

    // Another layer of the plotted family keeps the plot and moves the mark.
    plot.setKey(fc1.arg(0));
    plot.setStats(stats);
    plot.setKey(fc1.arg(2));
    EXPECT_EQ(plot.plottedFamily(), stats->family);
    ASSERT_EQ(p->graph(1)->dataCount(), 1);
    EXPECT_EQ(p->graph(1)->dataMainKey(0), 2.0);
}
