// SPDX-License-Identifier: MIT
#pragma once

#include "checkpointbackend.h"

#include <shardscope/remote.h>

#include <QString>

#include <map>
#include <memory>
#include <mutex>

namespace shardscope::model {

/**
 * The backend of a checkpoint on another host: every call sent to `shardscope-cli serve
 * --stdio` there through a RemoteSession (the system's ssh), its results the same types the
 * local backend returns. Layouts and configs are files here (read here; a layout travels with
 * the request that needs it); a report comes back and is written here; a repair is written
 * there, beside the source. A dropped connection fails the calls in one line and leaves what
 * the window holds; reconnect() connects anew with the same options (the same prompt).
 */
class RemoteBackend final : public CheckpointBackend
{
public:
    static Result<std::shared_ptr<RemoteBackend>> connect(const RemoteTarget &target,
                                                          const RemoteConnectOptions &options);

    /** "host" or "user@host:port", as the user named it. */
    QString location() const override;
    std::shared_ptr<RemoteSession> session() const;
    /** How verify runs there: in the server's process (the default) or as a job it launches. */
    void setLaunch(const RemoteLaunch &launch);

    bool connected() const override;
    Status reconnect() override;

    Result<CheckpointIndex> open(const std::string &path, const OpenOptions &options) override;
    /** `control`: the server's progress ("open", then "receive" while the index travels), and
     *  a cancel that stops the open there. */
    Result<IndexSnapshot> openShared(const std::string &path, const OpenOptions &options,
                                     const JobControl &control) override;
    TensorDetails tensorDetails(const IndexSnapshot &index, const std::string &key,
                                const JobControl &control) override;
    ObjectDetails objectDetails(const IndexSnapshot &index, const std::string &key) override;
    Result<Layout> readLayout(const std::string &path) override;
    Result<Layout> layoutFromConfig(const std::string &config,
                                    const LayoutOptions &options) override;
    Result<DiffResult> diff(const DiffRequest &request, const JobControl &control) override;
    Result<VerifyReport> verify(const VerifyRequest &request, const JobControl &control) override;
    Result<CheckpointDiff> compare(const CheckpointDiffRequest &request,
                                   const JobControl &control) override;
    Result<ValueDiffResult> values(const ValueDiffRequest &request,
                                   const JobControl &control) override;
    Result<ReportOutput> report(const ReportRequest &request, const JobControl &control) override;
    Result<FixResult> fix(const FixRequest &request, const JobControl &control) override;
    Result<InspectResult> inspect(const InspectRequest &request,
                                  const JobControl &control) override;

private:
    RemoteBackend(RemoteTarget target, RemoteConnectOptions options,
                  std::shared_ptr<RemoteSession> session);
    /** The index this session opened last at `path` (requests that name only the path use
     *  the server's open one); null when none. */
    OpenedIndex openedAt(const std::string &path) const;

    RemoteTarget m_target;
    RemoteConnectOptions m_options;
    mutable std::mutex m_mutex;
    std::shared_ptr<RemoteSession> m_session;
    RemoteLaunch m_launch;
    std::map<std::string, std::weak_ptr<const CheckpointIndex>> m_opened;
};

} // namespace shardscope::model
