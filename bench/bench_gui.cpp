// SPDX-License-Identifier: MIT
// The window at DeepSeek-V3 scale, timed as a user meets it (bench/gui_bench.sh):
//   bench_gui DIR LAYOUT
// open to first paint; filter keystrokes (from the debounced filter signal to the repainted
// tree); the diff against LAYOUT populated in the diff view and the tree; a rule switched off
// and the new diff applied. Prints one JSON object (seconds).
#include "mainwindow.h"

#include "model/checkpointsession.h"
#include "model/checkpointtreemodel.h"
#include "widgets/diffpanel.h"
#include "widgets/filterbar.h"

#include <QAction>
#include <QApplication>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QMenu>
#include <QThread>
#include <QToolButton>

#include <algorithm>
#include <cstdio>
#include <functional>

using shardscope::gui::MainWindow;
using shardscope::model::CheckpointSession;

namespace {

bool waitFor(const std::function<bool()> &done, int ms = 600'000)
{
    QElapsedTimer t;
    t.start();
    while (!done()) {
        if (t.elapsed() > ms)
            return false;
        QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
        QThread::usleep(200);
    }
    return true;
}

// Everything queued is handled and the window painted (grab() paints every visible widget).
void settleAndPaint(MainWindow &w)
{
    QCoreApplication::processEvents();
    (void)w.grab();
}

} // namespace

int main(int argc, char **argv)
{
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    if (argc < 3) {
        std::fprintf(stderr, "usage: bench_gui DIR LAYOUT\n");
        return 2;
    }
    const QString dir = QString::fromLocal8Bit(argv[1]);
    const QString layout = QString::fromLocal8Bit(argv[2]);
    MainWindow w;
    w.resize(1440, 900);
    w.show();
    CheckpointSession *s = w.session();
    QElapsedTimer t;

    // Open: from the request to the tree painted (its keys: a DCP tree is shown while the
    // storage locations are still being read), and to the checkpoint open in full.
    t.start();
    w.openPath(dir);
    if (!waitFor([&] { return w.treeModel()->rowCount() > 0 || s->index() != nullptr; }))
        return 1;
    settleAndPaint(w);
    const double open = t.nsecsElapsed() / 1e9;
    std::fprintf(stderr, "open %.3f\n", open);
    if (!waitFor([&] { return s->index() != nullptr; }))
        return 1;
    settleAndPaint(w);
    const double opened = t.nsecsElapsed() / 1e9;
    std::fprintf(stderr, "opened %.3f\n", opened);

    // Filter keystrokes: each text as the debounced signal delivers it, to the tree repainted.
    auto *bar = w.findChild<shardscope::widgets::FilterBar *>();
    double worstFilter = 0;
    QStringList typed;
    for (const char *text : {"e", "ex", "exp_avg", "layers.7.", "layers.7.mlp.experts.local_e",
                             "local_experts.200.linear_fc1", ""}) {
        t.restart();
        Q_EMIT bar->textChanged(QString::fromLatin1(text));
        settleAndPaint(w);
        const double seconds = t.nsecsElapsed() / 1e9;
        worstFilter = std::max(worstFilter, seconds);
        typed
            << QStringLiteral("\"%1\": %2").arg(QString::fromLatin1(text)).arg(seconds, 0, 'f', 3);
    }

    // The diff: populated in the diff view and marked in the tree.
    t.restart();
    w.setLayoutPath(layout);
    if (!waitFor([&] { return s->diff() != nullptr; }))
        return 1;
    settleAndPaint(w);
    const double diff = t.nsecsElapsed() / 1e9;
    std::fprintf(stderr, "diff %.3f\n", diff);

    // A rule switched off (swiglu: half the entries take other paths), the new diff applied.
    QAction *rule = nullptr;
    for (QAction *a :
         w.diffPanel()->findChild<QToolButton *>(QStringLiteral("rules"))->menu()->actions())
        if (a->text() == QStringLiteral("swiglu"))
            rule = a;
    if (!rule)
        return 1;
    const auto before = s->diff();
    t.restart();
    rule->setChecked(false);
    if (!waitFor([&] { return s->diff() && s->diff() != before; }))
        return 1;
    settleAndPaint(w);
    const double toggle = t.nsecsElapsed() / 1e9;
    // The same job goes on to fold the problems for the Problems list, then ends.
    if (!waitFor([&] { return !s->isJobRunning(); }))
        return 1;
    const double toggleSettled = t.nsecsElapsed() / 1e9;

    // A structural compare of the checkpoint with a second opening of itself: whole, then
    // cancelled halfway (at most 3 s) with the status bar's Cancel button, timed from the click
    // to the job's end.
    bool compareEnded = false;
    QString compareMessage;
    QObject::connect(s, &CheckpointSession::jobEnded,
                     [&](const shardscope::model::JobInfo &job, bool, const QString &message) {
                         if (job.kind == shardscope::model::JobKind::Compare) {
                             compareEnded = true;
                             compareMessage = message;
                         }
                     });
    auto compareRunning = [&] {
        for (const auto &job : s->jobs())
            if (job.kind == shardscope::model::JobKind::Compare)
                return true;
        return false;
    };
    w.setComparePath(dir);
    if (!waitFor(compareRunning))
        return 1;
    t.restart();
    if (!waitFor([&] { return compareEnded; }))
        return 1;
    const double compare = t.nsecsElapsed() / 1e9;
    compareEnded = false;
    w.setComparePath(dir);
    if (!waitFor(compareRunning))
        return 1;
    t.restart();
    const int cancelAt = int(std::min(3.0, compare / 2) * 1000);
    waitFor([] { return false; }, cancelAt);
    if (compareEnded)
        return 1;
    t.restart();
    w.findChild<QToolButton *>(QStringLiteral("cancelJob"))->click();
    if (!waitFor([&] { return compareEnded; }))
        return 1;
    const double cancelled = t.nsecsElapsed() / 1e9;
    std::fprintf(stderr, "compare %.3f, cancelled at %.3f: %s after %.3f\n", compare,
                 cancelAt / 1000.0, qPrintable(compareMessage), cancelled);

    std::fprintf(stderr, "done\n");
    std::printf("{\"open_to_paint\": %.3f, \"open_to_complete\": %.3f, \"filter_worst\": %.3f, "
                "\"filter\": {%s}, \"diff_view\": %.3f, \"rule_toggle\": %.3f, "
                "\"rule_toggle_problems_folded\": %.3f, \"leaves_kept_at_init\": %zu, "
                "\"compare\": %.3f, \"compare_cancel\": {\"at\": %.3f, \"ended_after\": %.3f, "
                "\"message\": \"%s\"}}\n",
                open, opened, worstFilter, qPrintable(typed.join(QStringLiteral(", "))), diff,
                toggle, toggleSettled,
                w.treeModel()->markedLeaves(shardscope::model::LoadMark::KeptAtInit), compare,
                cancelAt / 1000.0, cancelled, qPrintable(compareMessage));
    return 0;
}
