// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/comparepanel.h"

#include <QFileDialog>
#include <QFileInfo>

namespace shardscope::gui {

using model::CheckpointSession;
using widgets::ComparePanel;

void bindComparePanel(ComparePanel *panel, CheckpointSession *session, WindowServices &window)
{
    QObject::connect(panel, &ComparePanel::chooseRequested, panel, [session, &window] {
        const QString dir = QFileDialog::getExistingDirectory(
            window.dialogParent(), QObject::tr("Checkpoint to compare with"),
            QFileInfo(session->path()).absolutePath());
        if (!dir.isEmpty())
            window.setComparePath(dir);
    });
    QObject::connect(panel, &ComparePanel::valuesRequested, panel,
                     [&window] { window.compareValues(); });
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
    auto comparingValues = [session] {
        return session->jobKind() == CheckpointSession::JobKind::Values;
    };
    QObject::connect(session, &CheckpointSession::jobStarted, panel, [panel, comparingValues] {
        if (comparingValues())
            panel->jobStarted();
    });
    QObject::connect(session, &CheckpointSession::jobEnded, panel,
                     [panel, comparingValues](bool ok, const QString &message) {
                         if (comparingValues())
                             panel->jobEnded(ok, message);
                     });
}

} // namespace shardscope::gui
