// SPDX-License-Identifier: MIT
#pragma once
// One parameter's verification: every rank's planned reads gathered, checked against a direct
// read of its stored components, round trip and replicas; what verifyLoad() runs per parameter,
// on one thread or several.

#include "shardscope/checkpoint.h"
#include "shardscope/diff.h"
#include "shardscope/verify.h"
#include "verify/verifyrows.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace shardscope::detail {

/** What every parameter's check shares: read-only once set up, but for the counters. */
struct VerifyRun
{
    VerifyRun(const CheckpointIndex &checkpoint, const Layout &layout, const DiffResult &diff,
              const LoadPlan &plan, const VerifyOptions &options);

    const CheckpointIndex &checkpoint;
    const Layout &layout;
    const VerifyOptions &options;
    Communicator *comm = nullptr; ///< null: one process plays every rank
    int me = -1;                  ///< this process's rank; -1 in one process
    int procs = 1;
    bool gpu = false;
    std::unordered_map<std::string, const TensorEntry *> byKey;
    std::unordered_map<std::string, const DiffEntry *> entryOf;
    struct PerRank
    {
        int rank;
        const ParamShard *shard;
        std::vector<const ShardRead *> reads;
    };
    std::vector<std::vector<PerRank>> perParam; ///< ranks holding each parameter, in rank order
    uint64_t total = 0;                         ///< bytes this process reads by the plan

    // Set by verifyLoad() before any check.
    uint64_t budget = 0;   ///< bytes one checker may hold; 0 = no limit
    bool overlap = true;   ///< health runs beside the next read: one more window held
    int healthThreads = 0; ///< threads of one CPU health computation; 0 = its own choice

    std::atomic<uint64_t> done{0}, bytesRead{0};
    std::atomic<bool> cancelled{false}; ///< one process: the progress callback said stop

    /**
     * One process, after each window's reads: calls the progress callback (one call at a time,
     * so `done` never goes back); false once it has said stop, and then for every thread.
     */
    bool reportProgress();

    const DiffEntry *entry(uint32_t param) const; ///< the diff's entry for it, or null
    DType storedDType(uint32_t param) const;      ///< the dtype its bytes are compared in
    /** Bytes parameter `param` needs held at once when it is not streamed. */
    uint64_t wholeNeed(uint32_t param) const;
    /** Copies of a window held at once: gathered, direct, the spare, replicas, the all-gather. */
    uint64_t copies(uint32_t param) const;

private:
    std::mutex m_progressMutex;
};

/** One parameter's check, and the window whose health is still to be computed. */
struct CheckedParam
{
    ParamCheck check;
    std::optional<TensorData> healthInput; ///< the whole gathered tensor (not streamed)
};

/** Health of a gathered tensor: the GPU when the run has one (the CPU if it fails there). */
Result<TensorHealth> healthOf(const TensorData &tensor, bool gpu, int threads);

/** A checker's buffers are its own: one per thread. */
class ParamChecker
{
public:
    explicit ParamChecker(VerifyRun &run)
        : m_run(run)
    {}

    /**
     * Gathers and checks parameter `param`; `owner` is the rank that checks it (this process's
     * rank, or -1 in one process). An error stops the run; nullopt means another rank checks it,
     * or the job stops (stopped(), failed()).
     */
    Result<std::optional<CheckedParam>> check(uint32_t param, int owner);

    /** A window's bytes back after their health, to be reused. */
    void giveBack(std::vector<std::byte> bytes) { m_spare = std::move(bytes); }

    /** Across processes: this rank's error, until every rank has heard of it. */
    const std::optional<Error> &failed() const { return m_failed; }
    /** Across processes some rank failed or cancelled; in one process, a cancel. */
    bool stopped() const { return m_stop; }
    /** Stopped by a cancel: across processes some rank's, in one process the callback's. */
    bool cancelled() const { return m_cancelled; }

private:
    struct Part
    {
        const VerifyRun::PerRank *pr;
        std::vector<RowRun> runs;
        size_t bytes;
        std::span<std::byte> payload; // replicas: where their copy is
    };
    struct Param; // what the windows of one parameter share

    Status gatherRows(const Param &p, int64_t from, int64_t to);
    Status fillPayload(const VerifyRun::PerRank &pr, const std::vector<RowRun> &runs, int64_t from,
                       int64_t to, std::span<std::byte> payload, DType dtype,
                       int64_t localRowBytes);
    void checkWindow(const Param &p, ParamCheck &check, int64_t from, int64_t to);
    void countDone(uint32_t param, int64_t from, int64_t to, int64_t elementSize);

    VerifyRun &m_run;
    std::vector<std::byte> m_gathered; // a window of the gathered parameter
    std::vector<std::byte> m_direct;   // the same rows, read directly
    std::vector<std::byte> m_spare;
    std::vector<std::byte> m_sendBuf, m_recvBuf; // one window's all-gather, with a status byte
    std::vector<std::vector<std::byte>> m_replicaStore; // one process: payloads not in place
    std::vector<std::byte> m_replicaExpected;
    std::vector<RowRun> m_runs;
    std::vector<Part> m_parts, m_replicas;
    std::optional<Error> m_failed;
    bool m_stop = false, m_cancelled = false;
};

} // namespace shardscope::detail
