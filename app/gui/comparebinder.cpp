// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/comparepanel.h"

#include <QFileDialog>
#include <QFileInfo>

namespace shardscope::gui {

using model::CheckpointSession;
using model::JobInfo;
using model::JobKind;
using widgets::ComparePanel;

void bindComparePanel(ComparePanel *panel, CheckpointSession *session, WindowServices &window)
{
    QObject::connect(panel, &ComparePanel::chooseRequested, panel, [session, &window] {
        const QString dir = QFileDialog::getExistingDirectory(
            window.dialogParent(), QObject::tr("Checkpoint to compare with"),
            QFileInfo(session->path()).absolutePath());
        if (!dir.isEmpty())
            session->openCompare(dir);
    });
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
        panel->setComparePath(session->comparePath());
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
