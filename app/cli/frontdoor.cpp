// SPDX-License-Identifier: MIT
#include "frontdoor.h"

#include <sys/stat.h>

namespace shardscope::cli {

namespace {
RemoteSession *g_remote = nullptr;
} // namespace

void setRemote(RemoteSession *session)
{
    g_remote = session;
}

RemoteSession *remote()
{
    return g_remote;
}

Result<std::shared_ptr<const Layout>> sentLayout(const std::string &path)
{
    struct stat st;
    if (!g_remote || ::stat(path.c_str(), &st) != 0)
        return std::shared_ptr<const Layout>();
    auto layout = readLayout(path);
    if (!layout)
        return layout.error();
    return std::shared_ptr<const Layout>(std::make_shared<const Layout>(std::move(*layout)));
}

namespace jobs {

Result<InspectResult> inspect(const InspectRequest &r, const JobControl &c)
{
    return g_remote ? g_remote->runInspect(r, c) : runInspect(r, c);
}

Result<DiffResult> diff(const DiffRequest &r, const JobControl &c)
{
    return g_remote ? g_remote->runDiff(r, c) : runDiff(r, c);
}

Result<CheckpointDiff> checkpointDiff(const CheckpointDiffRequest &r, const JobControl &c)
{
    return g_remote ? g_remote->runCheckpointDiff(r, c) : runCheckpointDiff(r, c);
}

Result<ValueDiffResult> valueDiff(const ValueDiffRequest &r, const JobControl &c)
{
    return g_remote ? g_remote->runValueDiff(r, c) : runValueDiff(r, c);
}

Result<VerifyReport> verify(const VerifyRequest &r, const JobControl &c, const RemoteLaunch &l)
{
    return g_remote ? g_remote->runVerify(r, c, l) : runVerify(r, c);
}

Result<ReportOutput> report(const ReportRequest &r, const JobControl &c)
{
    return g_remote ? g_remote->runReport(r, c) : runReport(r, c);
}

Result<FixResult> fix(const FixRequest &r, const JobControl &c)
{
    return g_remote ? g_remote->runFix(r, c) : runFix(r, c);
}

} // namespace jobs

} // namespace shardscope::cli
