// SPDX-License-Identifier: MIT
// Where the commands' jobs run: here (the backend's front door), or with --ssh on another host
// (a RemoteSession), with the same requests and results, so that each command prints what it
// would print on that host.
#pragma once

#include <shardscope/remote.h>
#include <shardscope/session.h>

#include <memory>
#include <string>

namespace shardscope::cli {

/** --ssh: the session the jobs run through (null: here). Set once, before any job. */
void setRemote(RemoteSession *session);
RemoteSession *remote();

/**
 * A layout file the user named: with --ssh, read here when it is here (it travels with the
 * request), else null (the remote host reads the path). Without --ssh null: the job reads it.
 */
Result<std::shared_ptr<const Layout>> sentLayout(const std::string &path);

namespace jobs {
Result<InspectResult> inspect(const InspectRequest &request, const JobControl &control = {});
Result<DiffResult> diff(const DiffRequest &request, const JobControl &control = {});
Result<CheckpointDiff> checkpointDiff(const CheckpointDiffRequest &request,
                                      const JobControl &control = {});
Result<ValueDiffResult> valueDiff(const ValueDiffRequest &request, const JobControl &control = {});
Result<VerifyReport> verify(const VerifyRequest &request, const JobControl &control = {},
                            const RemoteLaunch &launch = {});
Result<ReportOutput> report(const ReportRequest &request, const JobControl &control = {});
Result<FixResult> fix(const FixRequest &request, const JobControl &control = {});
} // namespace jobs

} // namespace shardscope::cli
