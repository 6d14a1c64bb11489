// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "steptimer.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/diffpanel.h"

namespace shardscope::gui {

using model::CheckpointSession;
using widgets::DiffPanel;

void bindDiffPanel(DiffPanel *panel, CheckpointSession *session, WindowServices &window)
{
    // The rules, strictness and partial load: each change diffs again.
    QObject::connect(panel, &DiffPanel::optionsChanged, session,
                     [session](const DiffOptions &options) {
                         if (session->index() && !session->layoutPath().isEmpty())
                             session->runDiff(options);
                     });
    // A selected parameter shows in the tree where it is stored (its first stored key).
    QObject::connect(panel, &DiffPanel::entrySelected, panel,
                     [&window](const QString &, const QString &storedKey) {
                         window.selectStoredKey(storedKey);
                     });
    QObject::connect(session, &CheckpointSession::layoutChanged, panel,
                     [panel, session] { panel->setAgainst(session->layoutName()); });
    QObject::connect(session, &CheckpointSession::diffChanged, panel,
                     [panel, &window](const model::DiffSnapshot &diff) {
                         StepTimer timer("diff binder");
                         panel->setDiff(diff);
                         timer.step("diff panel");
                         if (diff && !diff->clean()) // something to read: its tab, with room
                             window.showPanel(QStringLiteral("diff"));
                     });
}

} // namespace shardscope::gui
