// SPDX-License-Identifier: MIT
#include "panelbinders.h"
#include "remoteconnect.h"
#include "windowservices.h"

#include "model/checkpointsession.h"
#include "widgets/verifypanel.h"

namespace shardscope::gui {

using model::CheckpointSession;
using model::JobInfo;
using model::JobKind;
using widgets::VerifyPanel;

void bindVerifyPanel(VerifyPanel *panel, CheckpointSession *session, WindowServices &window,
                     const std::shared_ptr<model::RemoteBackend> &remote)
{
    // On another host a verification runs in the server or as a job it launches there, as the
    // user last chose for that host.
    if (remote) {
        const QString host = remote->location();
        const RemoteServerInfo &server = remote->session()->server();
        panel->setRemoteHost(host, server.srun, server.torchrun);
        const RemoteLaunch launch = remoteLaunchFor(host);
        panel->setLaunch(launch);
        remote->setLaunch(panel->launch());
        QObject::connect(panel, &VerifyPanel::launchChanged, panel,
                         [weak = std::weak_ptr(remote), host](const RemoteLaunch &l) {
                             if (auto r = weak.lock())
                                 r->setLaunch(l);
                             setRemoteLaunchFor(host, l);
                         });
    }
    QObject::connect(panel, &VerifyPanel::parameterSelected, panel,
                     [&window](const QString &, const QString &storedKey) {
                         window.selectStoredKey(storedKey);
                     });
    // The verification loads with the rules the diff shows (a rule switched off stays off).
    QObject::connect(panel, &VerifyPanel::runRequested, session,
                     [session, &window](VerifyRequest request) {
                         if (!session->index() || session->layoutPath().isEmpty()) {
                             window.showError(QObject::tr("Verify"),
                                              QObject::tr("Open a checkpoint and a layout or "
                                                          "model config first."));
                             return;
                         }
                         window.showPanel(QStringLiteral("verify"));
                         request.disabledRules = window.diffOptions().disabledRules;
                         session->runVerify(std::move(request));
                     });
    QObject::connect(panel, &VerifyPanel::cancelRequested, session,
                     [session] { session->cancelKind(JobKind::Verify); });
    QObject::connect(
        session, &CheckpointSession::diffChanged, panel,
        [panel](const model::DiffSnapshot &diff) { panel->setReady(diff != nullptr); });
    QObject::connect(session, &CheckpointSession::verificationChanged, panel,
                     [panel, session, &window](const model::VerifySnapshot &report) {
                         panel->setReport(report, session->diff());
                         window.updateLoadMarks();
                         if (report && !report->result.clean())
                             window.showPanel(QStringLiteral("verify"));
                     });
    QObject::connect(session, &CheckpointSession::jobStarted, panel, [panel](const JobInfo &job) {
        if (job.kind == JobKind::Verify)
            panel->jobStarted();
    });
    QObject::connect(session, &CheckpointSession::jobProgress, panel,
                     [panel](const JobInfo &job, const QString &stage, int permille, double eta) {
                         if (job.kind == JobKind::Verify)
                             panel->jobProgress(stage, permille, eta);
                     });
    QObject::connect(session, &CheckpointSession::jobEnded, panel,
                     [panel](const JobInfo &job, bool ok, const QString &message) {
                         if (job.kind == JobKind::Verify)
                             panel->jobEnded(ok, message);
                     });
}

} // namespace shardscope::gui
