// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/diffpanel.h"

namespace shardscope::gui {

void bindDiffPanel(widgets::DiffPanel *panel, model::CheckpointSession *session,
                   WindowServices &window)
{
    QObject::connect(panel, &widgets::DiffPanel::optionsChanged, session,
                     [session](const DiffOptions &options) {
                         if (session->index() && !session->layoutPath().isEmpty())
                             session->runDiff(options);
                     });
    // A selected parameter shows in the tree where it is stored (its first stored key).
    QObject::connect(panel, &widgets::DiffPanel::entrySelected, panel,
                     [&window](const QString &, const QString &storedKey) {
                         window.selectStoredKey(storedKey);
                     });
}

} // namespace shardscope::gui
