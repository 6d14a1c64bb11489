// SPDX-License-Identifier: MIT
// What leaves the window: exported reports (the CLI's, byte for byte), the repaired
// checkpoint, and the command line that reproduces the current view.
#include "mainwindow.h"

#include "model/checkpointsession.h"
#include "model/formatting.h"
#include "model/reprocommand.h"
#include "widgets/comparepanel.h"
#include "widgets/diffpanel.h"
#include "widgets/verifypanel.h"

#include <utility>

using namespace shardscope::model;
using namespace shardscope::widgets;

namespace shardscope::gui {

// A generated layout lives in the session's temporary folder: a report names it beside itself.
QString MainWindow::reportLayoutPath(const QString &reportPath) const
{
    return m_session->keptLayoutPath(reportPath);
}

QStringList MainWindow::reportArguments(const QString &path) const
{
    const QString layout = reportLayoutPath(path);
    if (comparing()) {
        const ValueDiffRequest values = m_comparePanel->valueRequest();
        return repro::compare(QStringLiteral("report"), m_session->path(), m_session->comparePath(),
                              m_diffPanel->options(), m_session->values() ? &values : nullptr,
                              layout, path);
    }
    return repro::diff(QStringLiteral("report"), m_session->path(), layout, m_diffPanel->options(),
                       path);
}

void MainWindow::exportReport(const QString &path)
{
    if (!reportFormatForPath(path.toStdString())) {
        showError(tr("Export report"), tr("%1: a report ends in .md, .html or .json").arg(path));
        return;
    }
    if (!m_session->index() || (!comparing() && m_session->layoutPath().isEmpty())) {
        showError(tr("Export report"),
                  tr("Check the checkpoint against a layout or model config, or compare it "
                     "with another checkpoint, first."));
        return;
    }
    const QString layout = reportLayoutPath(path);
    const DiffOptions options = m_diffPanel->options();
    const std::string checkpoint = QFile::encodeName(m_session->path()).toStdString();
    const std::string layoutFile = QFile::encodeName(layout).toStdString();
    ReportRequest request;
    request.format = *reportFormatForPath(path.toStdString());
    request.context.command = repro::commandLine(reportArguments(path)).toStdString();
    if (comparing()) {
        const std::string second = QFile::encodeName(m_session->comparePath()).toStdString();
        request.against = CheckpointDiffRequest{checkpoint, second, options, nullptr, nullptr};
        if (m_session->values()) {
            ValueDiffRequest values = m_comparePanel->valueRequest();
            values.first = checkpoint;
            values.second = second;
            values.layout = layout.isEmpty() ? std::string() : layoutFile;
            values.disabledRules = options.disabledRules;
            request.values = values;
        }
    } else {
        // The report says what `fix` would repair, as the CLI's does.
        DiffOptions withRepair = options;
        withRepair.previewRepair = true;
        request.diff = DiffRequest{checkpoint, layoutFile, withRepair, nullptr};
    }
    m_session->exportReport(std::move(request), path);
}

void MainWindow::saveRepaired(const QString &output)
{
    FixRequest request;
    request.output = QFile::encodeName(output).toStdString();
    request.options = m_diffPanel->options();
    // The layout the manifest's command and "Check it with:" name outlives the window (on
    // another host, the copy written there beside the output).
    const QString layout = m_session->keptLayoutPath(output);
    request.layout = QFile::encodeName(layout).toStdString();
    request.commandLine =
        repro::commandLine(repro::fix(m_session->path(), m_session->repairLayoutPath(output),
                                      m_diffPanel->options(), output))
            .toStdString();
    m_session->saveRepaired(std::move(request));
}

QString MainWindow::reproCommand() const
{
    if (m_session->path().isEmpty())
        return {};
    QString prefix;
    QString layout = m_session->layoutPath();
    // A generated layout is written by the command itself, into a directory of its own: a
    // `layout.json` in the directory it is pasted in may be the user's.
    static const QString placeholder = QStringLiteral("SHARDSCOPE_GENERATED_LAYOUT_PATH");
    if (m_session->layoutIsGenerated()) {
        layout = placeholder;
        prefix = QStringLiteral("L=\"$(mktemp -d)/layout.json\" && ") +
                 repro::commandLine(
                     repro::layout(m_session->configPath(), m_session->layoutOptions(), layout)) +
                 QStringLiteral(" && ");
    }
    QStringList args;
    if (m_bottomTabs->currentWidget() == m_comparePanel && !m_session->comparePath().isEmpty()) {
        const ValueDiffRequest values = m_comparePanel->valueRequest();
        if (!m_session->values())
            prefix.clear(); // the structure needs no layout
        args = repro::compare(QStringLiteral("diff"), m_session->path(), m_session->comparePath(),
                              m_diffPanel->options(), m_session->values() ? &values : nullptr,
                              m_session->values() ? layout : QString());
    } else if (layout.isEmpty()) {
        return repro::commandLine(
            {QStringLiteral("shardscope-cli"), QStringLiteral("inspect"), m_session->path()});
    } else if (m_bottomTabs->currentWidget() == m_verifyPanel) {
        VerifyRequest request = m_verifyPanel->request();
        request.disabledRules = m_diffPanel->options().disabledRules;
        args = repro::verify(m_session->path(), layout, request);
    } else {
        args =
            repro::diff(QStringLiteral("diff"), m_session->path(), layout, m_diffPanel->options());
    }
    QString command = prefix + repro::commandLine(args);
    return command.replace(placeholder, QStringLiteral("\"$L\""));
}

} // namespace shardscope::gui
