// SPDX-License-Identifier: MIT
#pragma once

#include "tensordetails.h"

#include <shardscope/layout.h>
#include <shardscope/session.h>

#include <QString>

#include <memory>
#include <string>

namespace shardscope::model {

/**
 * Where a session's work runs: the front door's requests (shardscope/session.h) in, its
 * results out. The local backend calls the front door in this process; a remote one sends
 * the same requests to a `shardscope-cli serve` on the machine that holds the checkpoint and
 * decodes the same results, so that CheckpointSession, and the window above it, never know
 * which it talks to.
 *
 * Every call blocks, runs on one of the session's lanes (never the GUI thread), may run beside
 * another call on the other lane, and honours `control`'s cancel token and reports progress
 * through it. Paths are the backend's own (native bytes).
 */
class CheckpointBackend
{
public:
    virtual ~CheckpointBackend() = default;

    /** Where the checkpoints live, for titles and the status bar: empty for this machine. */
    virtual QString location() const { return {}; }

    virtual Result<CheckpointIndex> open(const std::string &path, const OpenOptions &options) = 0;
    /** open() as the snapshot the window keeps: a remote backend's later requests name the
     *  server's open index by this very pointer (the default wraps open()). */
    virtual Result<IndexSnapshot> openShared(const std::string &path, const OpenOptions &options,
                                             const JobControl &control);
    /** False once a remote backend's connection is gone: its calls fail saying so, and what
     *  the window holds stays. */
    virtual bool connected() const { return true; }
    /** A new connection in place of a lost one (the checkpoints are opened anew after it). */
    virtual Status reconnect() { return Ok{}; }
    /** A tensor of `index`: its health (the kernels `inspect --stats` and `verify` use), SHA-256
     *  and histogram; why not, in the details' error, when it cannot be read. */
    virtual TensorDetails tensorDetails(const IndexSnapshot &index, const std::string &key,
                                        const JobControl &control) = 0;
    virtual ObjectDetails objectDetails(const IndexSnapshot &index, const std::string &key) = 0;
    virtual Result<Layout> readLayout(const std::string &path) = 0;
    virtual Result<Layout> layoutFromConfig(const std::string &config,
                                            const LayoutOptions &options) = 0;
    virtual Result<DiffResult> diff(const DiffRequest &request, const JobControl &control) = 0;
    virtual Result<VerifyReport> verify(const VerifyRequest &request,
                                        const JobControl &control) = 0;
    virtual Result<CheckpointDiff> compare(const CheckpointDiffRequest &request,
                                           const JobControl &control) = 0;
    virtual Result<ValueDiffResult> values(const ValueDiffRequest &request,
                                           const JobControl &control) = 0;
    virtual Result<ReportOutput> report(const ReportRequest &request,
                                        const JobControl &control) = 0;
    virtual Result<FixResult> fix(const FixRequest &request, const JobControl &control) = 0;
    virtual Result<InspectResult> inspect(const InspectRequest &request,
                                          const JobControl &control) = 0;
};

/** The front door in this process. */
std::shared_ptr<CheckpointBackend> localBackend();

} // namespace shardscope::model
