// SPDX-License-Identifier: MIT
#include "mainwindow.h"
#include "model/diffchoices.h"
#include "remoteconnect.h"
#include "screenshotdriver.h"
#include "widgets/darkstyle.h"

#include "model/checkpointsession.h"

#include <shardscope/remote.h>
#include <shardscope/version.h>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QMessageBox>

#include <cstdio>

namespace {

// The demo next to an installed binary (share/shardscope/demo), else the source tree's.
QString bundledDemo()
{
    const QDir bin(QCoreApplication::applicationDirPath());
    for (const QString &candidate :
         {bin.filePath(QStringLiteral("../share/shardscope/demo/dsv3-mini")),
          QStringLiteral(SHARDSCOPE_DEMO_DIR)})
        if (QFileInfo(candidate + QStringLiteral("/config.json")).exists())
            return QDir(candidate).absolutePath();
    return {};
}

} // namespace

int main(int argc, char **argv)
{
    // ssh runs this binary as its SSH_ASKPASS while a remote window connects: the prompt goes
    // to the window that asked, before any GUI starts here.
    if (auto code = shardscope::runAskpassHelper(argc, argv))
        return *code;
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
    QCommandLineOption layout(QStringLiteral("layout"),
                              QStringLiteral("Check the checkpoint against this layout JSON."),
                              QStringLiteral("file"));
    QCommandLineOption config(
        QStringLiteral("config"),
        QStringLiteral("Check it against the layout of this model config (Hugging Face "
                       "config.json, Megatron arguments, or a Megatron checkpoint's saved args)."),
        QStringLiteral("file"));
    QCommandLineOption against(QStringLiteral("against"),
                               QStringLiteral("A second checkpoint to compare with."),
                               QStringLiteral("path"));
    QCommandLineOption verify(QStringLiteral("verify"),
                              QStringLiteral("Verify the load once the diff is there."));
    QCommandLineOption values(QStringLiteral("values"),
                              QStringLiteral("With --against: compare the values too."));
    QCommandLineOption layers(QStringLiteral("plot-layers"),
                              QStringLiteral("Plot the selected tensor's family across layers."));
    QCommandLineOption dark(QStringLiteral("dark"),
                            QStringLiteral("A dark palette, whatever the system's."));
    QCommandLineOption panel(QStringLiteral("panel"),
                             QStringLiteral("Show a panel: problems, diff, verify or compare."),
                             QStringLiteral("name"));
    QList<QCommandLineOption> sizes;
    for (const char *name : {"tp", "pp", "ep", "etp", "dp"})
        sizes.append(QCommandLineOption(
            QString::fromLatin1(name),
            QStringLiteral("With --config: the %1 size.").arg(QString::fromLatin1(name).toUpper()),
            QStringLiteral("n")));
    QCommandLineOption disableRule(QStringLiteral("disable-rule"),
                                   QStringLiteral("Switch a rule off in the diff (repeatable)."),
                                   QStringLiteral("rule"));
    QCommandLineOption strictness(QStringLiteral("strictness"),
                                  QStringLiteral("Megatron's --dist-ckpt-strictness."),
                                  QStringLiteral("name"));
    QCommandLineOption noStrict(QStringLiteral("no-strict"),
                                QStringLiteral("A partial (non-strict) load."));
    QCommandLineOption ssh(QStringLiteral("ssh"),
                           QStringLiteral("Open the checkpoint on this host, through ssh "
                                          "([user@]host[:port] or a Host of ~/.ssh/config)."),
                           QStringLiteral("host"));
    QCommandLineOption server(QStringLiteral("server"),
                              QStringLiteral("With --ssh: shardscope-cli's path there, when it is "
                                             "not on the PATH of a non-interactive shell."),
                              QStringLiteral("path"));
    parser.addOption(ssh);
    parser.addOption(server);
    parser.addOption(disableRule);
    parser.addOption(strictness);
    parser.addOption(noStrict);
    parser.addOption(layout);
    parser.addOption(config);
    parser.addOption(against);
    parser.addOption(verify);
    parser.addOption(values);
    parser.addOption(panel);
    parser.addOption(layers);
    parser.addOption(dark);
    for (const QCommandLineOption &o : sizes)
        parser.addOption(o);
    parser.addOption(filter);
    parser.addOption(flat);
    parser.addOption(select);
    parser.addOption(screenshot);
    parser.addOption(size);
    parser.process(app);

    const QStringList args = parser.positionalArguments();
    if (parser.isSet(dark)) {
        // Fusion with a dark palette: what a dark desktop gives, for checking the colours.
        QApplication::setStyle(shardscope::widgets::createDarkStyle());
        QApplication::setPalette(shardscope::widgets::darkPalette());
    }

    using namespace shardscope::gui;
    // --ssh: the window's backend is a server on that host (connected first: a password or
    // 2FA prompt is asked in a dialog); the checkpoint named is a path there.
    std::shared_ptr<shardscope::model::CheckpointBackend> backend =
        shardscope::model::localBackend();
    if (parser.isSet(ssh)) {
        auto target = shardscope::RemoteTarget::parse(parser.value(ssh).toStdString());
        if (!target) {
            std::fprintf(stderr, "shardscope: %s\n", target.error().message.c_str());
            return 2;
        }
        if (parser.isSet(server))
            target->server = parser.value(server).toStdString();
        if (args.isEmpty()) {
            std::fprintf(stderr, "shardscope: --ssh needs the checkpoint's path there\n");
            return 2;
        }
        QString error;
        auto remote = connectRemote(nullptr, *target, &error);
        if (!remote) {
            std::fprintf(stderr, "shardscope: %s\n", qPrintable(error));
            if (!parser.isSet(screenshot))
                QMessageBox::warning(nullptr, QStringLiteral("ShardScope"), error);
            return 2;
        }
        addRecentRemoteLocation(parser.value(ssh), args.first(),
                                QString::fromStdString(target->server));
        backend = remote;
    }
    MainWindow window(backend);
    const QStringList wh = parser.value(size).split(QLatin1Char('x'));
    if (wh.size() == 2 && wh[0].toInt() > 0 && wh[1].toInt() > 0)
        window.resize(wh[0].toInt(), wh[1].toInt());
    if (parser.isSet(select))
        window.setInitialSelection(parser.value(select));
    if (parser.isSet(filter))
        window.setInitialFilter(parser.value(filter));
    if (parser.isSet(flat))
        window.setFlatList(true);
    ScreenshotDriver *driver = nullptr;
    if (parser.isSet(screenshot)) {
        driver = new ScreenshotDriver(&window, parser.value(screenshot)); // owned by the window
        driver->setVerify(parser.isSet(verify));
        driver->setValues(parser.isSet(values) && parser.isSet(against));
        driver->setLayers(parser.isSet(layers));
    }
    if (!parser.isSet(screenshot))
        window.restoreSettings();
    shardscope::DiffOptions diffOptions;
    for (const QString &rule : parser.values(disableRule))
        diffOptions.disabledRules.push_back(rule.toStdString());
    if (parser.isSet(strictness)) {
        const int s = shardscope::model::strictnessNames().indexOf(parser.value(strictness));
        if (s < 0) {
            std::fprintf(stderr, "shardscope: unknown --strictness %s\n",
                         qPrintable(parser.value(strictness)));
            return 2;
        }
        diffOptions.strictness = shardscope::Strictness(s);
    }
    diffOptions.strictLoad = !parser.isSet(noStrict);
    window.setDiffOptions(diffOptions);
    window.show();
    // No checkpoint named: the bundled demo with its layout (what a first run should show).
    QString path = args.isEmpty() ? QString() : args.first();
    QString configPath = parser.value(config);
    if (path.isEmpty() && !parser.isSet(ssh)) {
        const QString demo = bundledDemo();
        if (!demo.isEmpty()) {
            path = demo;
            if (configPath.isEmpty() && !parser.isSet(layout))
                configPath = demo + QStringLiteral("/config.json");
        }
    }
    if (!path.isEmpty())
        window.openPath(path);
    if (parser.isSet(layout)) {
        window.setLayoutPath(parser.value(layout));
    } else if (!configPath.isEmpty()) {
        shardscope::LayoutOptions options;
        int *fields[] = {&options.parallel.tp, &options.parallel.pp, &options.parallel.ep,
                         &options.parallel.etp, &options.parallel.dpShard};
        for (int i = 0; i < 5; ++i)
            if (parser.isSet(sizes[i])) {
                *fields[i] = parser.value(sizes[i]).toInt();
                options.parallelGiven = true;
            }
        window.setConfigPath(configPath, options);
    }
    if (parser.isSet(against))
        window.setComparePath(parser.value(against));
    if (!driver) { // the screenshot driver starts these itself, once what they need is there
        if (parser.isSet(verify))
            QObject::connect(window.session(), &shardscope::model::CheckpointSession::diffChanged,
                             &window, [&window](const shardscope::model::DiffSnapshot &d) {
                                 if (d && !window.session()->verification() &&
                                     !window.session()->isJobRunning())
                                     window.verifyLoad();
                             });
        if (parser.isSet(values))
            QObject::connect(window.session(),
                             &shardscope::model::CheckpointSession::comparisonChanged, &window,
                             [&window](const shardscope::model::CompareSnapshot &c) {
                                 if (c && !window.session()->values())
                                     window.compareValues();
                             });
    }
    if (parser.isSet(panel))
        window.showPanel(parser.value(panel));
    return QApplication::exec();
}
