// SPDX-License-Identifier: MIT
#include "mainwindow.h"
#include "screenshotdriver.h"

#include <shardscope/version.h>

#include <QApplication>
#include <QCommandLineParser>

#include <cstdio>

int main(int argc, char **argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("ShardScope"));
    QApplication::setApplicationDisplayName(QStringLiteral("ShardScope"));
    QApplication::setOrganizationName(QStringLiteral("ShardScope"));
    QApplication::setApplicationVersion(QStringLiteral(SHARDSCOPE_VERSION));

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("Inspect large-model training checkpoints (DCP, Megatron, torch.save, "
                       "safetensors)."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("path"),
                                 QStringLiteral("Checkpoint directory or file to open."));
    // Documentation and tests: open `path`, select the first tensor, save the window, exit.
    QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                  QStringLiteral("Save a PNG of the window to <file> and exit."),
                                  QStringLiteral("file"));
    screenshot.setFlags(QCommandLineOption::HiddenFromHelp);
    QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Window size, WxH."),
                            QStringLiteral("WxH"), QStringLiteral("1440x900"));
    size.setFlags(QCommandLineOption::HiddenFromHelp);
    QCommandLineOption select(QStringList{QStringLiteral("s"), QStringLiteral("select")},
                              QStringLiteral("Select the entry with this full key once open."),
                              QStringLiteral("key"));
    QCommandLineOption filter(QStringList{QStringLiteral("f"), QStringLiteral("filter")},
                              QStringLiteral("Filter the keys once open (substring or glob)."),
                              QStringLiteral("text"));
    QCommandLineOption flat(QStringLiteral("flat"),
                            QStringLiteral("List full keys flat instead of as a tree."));
    parser.addOption(filter);
    parser.addOption(flat);
    parser.addOption(select);
    parser.addOption(screenshot);
    parser.addOption(size);
    parser.process(app);

    const QStringList args = parser.positionalArguments();
    if (parser.isSet(screenshot) && args.isEmpty()) {
        std::fprintf(stderr, "shardscope: --screenshot needs a checkpoint path\n");
        return 2;
    }

    using namespace shardscope::gui;
    MainWindow window;
    const QStringList wh = parser.value(size).split(QLatin1Char('x'));
    if (wh.size() == 2 && wh[0].toInt() > 0 && wh[1].toInt() > 0)
        window.resize(wh[0].toInt(), wh[1].toInt());
    if (parser.isSet(select))
        window.setInitialSelection(parser.value(select));
    if (parser.isSet(filter))
        window.setInitialFilter(parser.value(filter));
    if (parser.isSet(flat))
        window.setFlatList(true);
    if (parser.isSet(screenshot))
        new ScreenshotDriver(&window, parser.value(screenshot)); // owned by the window
    window.show();
    if (!args.isEmpty())
        window.openPath(args.first());
    return QApplication::exec();
}
