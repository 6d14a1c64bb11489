// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/verifypanel.h"

namespace shardscope::gui {

using model::CheckpointSession;
using widgets::VerifyPanel;

void bindVerifyPanel(VerifyPanel *panel, CheckpointSession *session, WindowServices &window)
{
    QObject::connect(panel, &VerifyPanel::parameterSelected, panel,
                     [&window](const QString &, const QString &storedKey) {
                         window.selectStoredKey(storedKey);
                     });
    // The verification loads with the rules the diff shows (a rule switched off stays off).
    QObject::connect(panel, &VerifyPanel::runRequested, session,
                     [session, &window](VerifyRequest request) {
                         request.disabledRules = window.diffOptions().disabledRules;
                         session->runVerify(std::move(request));
                     });
    QObject::connect(panel, &VerifyPanel::cancelRequested, session, &CheckpointSession::cancel);
    QObject::connect(session, &CheckpointSession::verificationChanged, panel,
                     [panel, session, &window](const model::VerifySnapshot &report) {
                         panel->setReport(report, session->diff());
                         window.updateLoadMarks();
                         if (report && !report->result.clean())
                             window.showPanel(QStringLiteral("verify"));
                     });
    auto verifying = [session] { return session->jobKind() == CheckpointSession::JobKind::Verify; };
    QObject::connect(session, &CheckpointSession::jobStarted, panel, [panel, verifying] {
        if (verifying())
            panel->jobStarted();
    });
    QObject::connect(session, &CheckpointSession::jobProgress, panel,
                     [panel, verifying](const QString &stage, int permille, double eta) {
                         if (verifying())
                             panel->jobProgress(stage, permille, eta);
                     });
    QObject::connect(session, &CheckpointSession::jobEnded, panel,
                     [panel, verifying](bool ok, const QString &message) {
                         if (verifying())
                             panel->jobEnded(ok, message);
                     });
}

} // namespace shardscope::gui
