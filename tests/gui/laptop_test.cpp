// SPDX-License-Identifier: MIT
// The real window at a laptop's size, used as a person uses it: under Xvfb at 1366×768 (or
// offscreen, with the screen's size given), driven by QTest's keys and clicks. Every control
// in reach and whole, at 1280×720 and 1366×768; the status bar readable; a window saved on a
// bigger screen reopened within this one.
#include "mainwindow.h"
#include "testwait.h"

#include "model/checkpointsession.h"
#include "widgets/elidedlabel.h"

#include <QAbstractButton>
#include <QAbstractScrollArea>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QGuiApplication>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QScreen>
#include <QSettings>
#include <QStatusBar>
#include <QTabBar>
#include <QTabWidget>
#include <QTest>

#include <gtest/gtest.h>

#include <ostream>

using namespace shardscope;
using namespace shardscope::model;
using shardscope::gui::MainWindow;
using shardscope::tests::waitFor;

namespace {

struct Size
{
    int width, height;
};

void PrintTo(const Size &s, std::ostream *os)
{
    *os << s.width << "x" << s.height;
}

QString describe(const QWidget *w)
{
    QString text;
    if (auto *b = qobject_cast<const QAbstractButton *>(w))
        text = b->text();
    else if (auto *l = qobject_cast<const QLabel *>(w))
        text = l->text().left(40);
    else if (auto *e = qobject_cast<const widgets::ElidedLabel *>(w))
        text = e->text().left(40);
    return QStringLiteral("%1 '%2' \"%3\"")
        .arg(QString::fromLatin1(w->metaObject()->className()), w->objectName(), text);
}

// Whether a user can reach `w` by scrolling: it sits in a scroll area (or an item view) below
// the window.
bool scrolled(const QWidget *w, const QWidget *window)
{
    for (const QWidget *p = w->parentWidget(); p && p != window; p = p->parentWidget())
        if (qobject_cast<const QAbstractScrollArea *>(p))
            return true;
    return false;
}

// Every control in sight: inside the window, not cut by a parent or squeezed below the size
// its text needs. Controls in a scroll area are reached by scrolling and are left out.
std::vector<std::string> unreachable(QWidget *window, int *checked = nullptr)
{
    std::vector<std::string> out;
    int seen = 0;
    const QRect bounds = window->rect();
    for (QWidget *w : window->findChildren<QWidget *>()) {
        if (!w->isVisible() || w->window() != window || scrolled(w, window))
            continue;
        const auto *label = qobject_cast<const QLabel *>(w);
        const bool control =
            qobject_cast<QAbstractButton *>(w) || qobject_cast<QComboBox *>(w) ||
            qobject_cast<QAbstractSpinBox *>(w) || qobject_cast<QTabBar *>(w) ||
            qobject_cast<widgets::ElidedLabel *>(w) || (label && !label->text().isEmpty()) ||
            (qobject_cast<QLineEdit *>(w) && !qobject_cast<QAbstractSpinBox *>(w->parentWidget()) &&
             !qobject_cast<QComboBox *>(w->parentWidget()));
        if (!control)
            continue;
        ++seen;
        const QRect at(w->mapTo(window, QPoint(0, 0)), w->size());
        if (!bounds.contains(at)) {
            out.push_back(describe(w).toStdString() + " lies outside the window");
            continue;
        }
        if (w->visibleRegion().boundingRect() != w->rect())
            out.push_back(describe(w).toStdString() + " is cut by its parent");
        const QSize need = w->minimumSizeHint();
        if (w->width() < need.width() || w->height() < need.height())
            out.push_back(describe(w).toStdString() + " is squeezed below its text");
    }
    for (QTabBar *bar : window->findChildren<QTabBar *>())
        if (bar->isVisible())
            for (int i = 0; i < bar->count(); ++i)
                if (!bar->rect().contains(bar->tabRect(i)))
                    out.push_back("tab " + bar->tabText(i).toStdString() + " is out of sight");
    if (auto *menus = window->findChild<QMenuBar *>())
        for (QAction *a : menus->actions())
            if (!menus->rect().contains(menus->actionGeometry(a)))
                out.push_back("menu " + a->text().toStdString() + " is out of sight");
    if (checked)
        *checked = seen;
    return out;
}

// The demo checked against its config with Megatron's MLA handler off under a partial load:
// ten parameters silently kept at their initial values.
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

class LaptopTest : public ::testing::TestWithParam<Size>
{
};

} // namespace

// Every control of every panel in reach and whole, the window no bigger than the laptop's
// screen, the load's outcome and the reading's problems readable in full in the status bar.
TEST_P(LaptopTest, EveryControlIsInReachAndWhole)
{
    const Size size = GetParam();
    MainWindow w;
    const QSize least = w.minimumSizeHint();
    EXPECT_LE(least.width(), size.width) << "minimum width " << least.width();
    EXPECT_LE(least.height(), size.height) << "minimum height " << least.height();
    w.resize(size.width, size.height);
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    openNegativeControl(w);
    EXPECT_EQ(w.size(), QSize(size.width, size.height));
    EXPECT_TRUE(w.screen()->availableGeometry().contains(w.frameGeometry()));

    auto *bottom = w.findChild<QTabWidget *>(QStringLiteral("bottomTabs"));
    auto *right = w.findChild<QTabWidget *>(QStringLiteral("rightTabs"));
    ASSERT_NE(bottom, nullptr);
    ASSERT_NE(right, nullptr);
    for (int b = 0; b < bottom->count(); ++b)
        for (int r = 0; r < right->count(); ++r) {
            bottom->setCurrentIndex(b);
            right->setCurrentIndex(r);
            QCoreApplication::processEvents();
            SCOPED_TRACE(bottom->tabText(b).toStdString() + " below, " +
                         right->tabText(r).toStdString() + " beside");
            int checked = 0;
            for (const std::string &problem : unreachable(&w, &checked))
                ADD_FAILURE() << problem;
            EXPECT_GE(checked, 8) << "the walk found too few controls to mean anything";
        }
    // The status bar says the load's outcome and the reading's problems whole.
    for (const char *name : {"loadOutcome", "readingProblems"}) {
        auto *label = w.statusBar()->findChild<widgets::ElidedLabel *>(QLatin1String(name));
        ASSERT_NE(label, nullptr) << name;
        EXPECT_TRUE(label->isVisible()) << name;
        EXPECT_FALSE(label->isElided()) << name << ": " << label->text().toStdString();
    }
}

INSTANTIATE_TEST_SUITE_P(Laptops, LaptopTest, ::testing::Values(Size{1280, 720}, Size{1366, 768}),
                         [](const ::testing::TestParamInfo<Size> &i) {
                             return std::to_string(i.param.width) + "x" +
                                    std::to_string(i.param.height);
                         });

// A window saved at 1900×1150 on a bigger screen opens within this one, whole.
TEST(LaptopWindowTest, RestoredWithinTheScreen)
{
    QScreen *screen = QGuiApplication::primaryScreen();
    ASSERT_NE(screen, nullptr);
    const QRect room = screen->availableGeometry();
    {
        MainWindow big;
        big.setGeometry(QRect(room.left() + 300, room.top() + 200, 1900, 1150));
        QSettings().setValue(QStringLiteral("window/geometry"), big.saveGeometry());
    }
    MainWindow w;
    w.restoreSettings();
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    EXPECT_TRUE(room.contains(w.frameGeometry()))
        << "window " << w.frameGeometry().x() << "," << w.frameGeometry().y() << " "
        << w.frameGeometry().width() << "x" << w.frameGeometry().height() << " on a screen of "
        << room.width() << "x" << room.height();
    QSettings().remove(QStringLiteral("window/geometry"));
}
