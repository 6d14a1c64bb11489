// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/comparepanel.h"

#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QLineEdit>

namespace shardscope::gui {

using model::CheckpointSession;
using model::JobInfo;
using model::JobKind;
using widgets::ComparePanel;

void chooseCompare(CheckpointSession *session, WindowServices &window)
{
    // Either side may be here or on a host: the structure is compared here over both indexes.
    const QString here = QObject::tr("On this computer…");
    const QString there = QObject::tr("On %1…").arg(session->location());
    const QString other = QObject::tr("On another host…");
    QStringList places{here};
    if (!session->location().isEmpty())
        places << there;
    places << other;
    bool ok = false;
    const QString place =
        QInputDialog::getItem(window.dialogParent(), QObject::tr("Compare With"),
                              QObject::tr("Where is the checkpoint to compare with?"), places,
                              session->location().isEmpty() ? 0 : 1, false, &ok);
    if (!ok)
        return;
    if (place == here) {
        const QString dir = QFileDialog::getExistingDirectory(
            window.dialogParent(), QObject::tr("Checkpoint to compare with"),
            session->location().isEmpty() ? QFileInfo(session->path()).absolutePath() : QString());
        if (!dir.isEmpty())
            session->openCompareHere(dir);
        return;
    }
    const QString text =
        QInputDialog::getText(
            window.dialogParent(), QObject::tr("Compare With"),
            place == there
                ? QObject::tr("Checkpoint on %1 (its path there):").arg(session->location())
                : QObject::tr("Checkpoint on another host ([user@]host[:port]:/path or "
                              "ssh://host/path):"),
            QLineEdit::Normal,
            place == there ? QFileInfo(session->path()).absolutePath() : QString(), &ok)
            .trimmed();
    if (!ok || text.isEmpty())
        return;
    if (place == other && !RemoteLocation::parse(QFile::encodeName(text).toStdString())) {
        window.showError(QObject::tr("Compare With"),
                         QObject::tr("Name the host and the path: host:/path or "
                                     "ssh://host/path."));
        return;
    }
    session->openCompare(text);
}

void bindComparePanel(ComparePanel *panel, CheckpointSession *session, WindowServices &window)
{
    QObject::connect(panel, &ComparePanel::chooseRequested, panel,
                     [session, &window] { chooseCompare(session, window); });
    // Values with the panel's tolerances and the rules the diff shows.
    QObject::connect(panel, &ComparePanel::valuesRequested, session,
                     [session, &window](ValueDiffRequest request) {
                         if (!session->index() || !session->compareIndex()) {
                             window.showError(QObject::tr("Compare values"),
                                              QObject::tr("Open a second checkpoint first (File "
                                                          "▸ Compare With…)."));
                             return;
                         }
                         window.showPanel(QStringLiteral("compare"));
                         request.disabledRules = window.diffOptions().disabledRules;
                         session->runValues(std::move(request));
                     });
    QObject::connect(panel, &ComparePanel::keySelected, panel,
                     [&window](const QString &key) { window.selectStoredKey(key); });
    // The structure as soon as the second checkpoint is open; values when asked.
    QObject::connect(session, &CheckpointSession::compareOpened, panel, [panel, session, &window] {
        // Where it lives when that is not where the open one does.
        panel->setComparePath(
            session->compareLocation() == session->location() ? session->comparePath()
            : session->compareLocation().isEmpty()
                ? QObject::tr("%1 (on this computer)").arg(session->comparePath())
                : session->compareLocation() + QLatin1Char(':') + session->comparePath());
        if (session->index())
            session->runCompare(window.diffOptions());
        window.showPanel(QStringLiteral("compare"));
    });
    QObject::connect(session, &CheckpointSession::comparisonChanged, panel,
                     &ComparePanel::setComparison);
    QObject::connect(session, &CheckpointSession::valuesChanged, panel, &ComparePanel::setValues);
    QObject::connect(session, &CheckpointSession::jobStarted, panel, [panel](const JobInfo &job) {
        if (job.kind == JobKind::Values)
            panel->jobStarted();
    });
    QObject::connect(session, &CheckpointSession::jobEnded, panel,
                     [panel](const JobInfo &job, bool ok, const QString &message) {
                         if (job.kind == JobKind::Values)
                             panel->jobEnded(ok, message);
                     });
}

} // namespace shardscope::gui
