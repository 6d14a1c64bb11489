// SPDX-License-Identifier: MIT
// The backend's front door: one request type per job, one way to run each, value-typed results.
// The CLI and the GUI both drive the backend through here, so neither decides a default, plans
// a load or writes a schema of its own. See docs/architecture.md.
#pragma once

#include "shardscope/checkpoint.h"
#include "shardscope/diff.h"
#include "shardscope/distributed.h"
#include "shardscope/fix.h"
#include "shardscope/health.h"
#include "shardscope/layout.h"
#include "shardscope/loadplan.h"
#include "shardscope/report.h"
#include "shardscope/valuediff.h"
#include "shardscope/verify.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** Asks a running job to stop; shared between the job and whoever may cancel it. */
class CancelToken
{
public:
    CancelToken()
        : m_flag(std::make_shared<std::atomic<bool>>(false))
    {}
    void cancel() const { m_flag->store(true); }
    bool cancelled() const { return m_flag->load(); }

private:
    std::shared_ptr<std::atomic<bool>> m_flag;
};

/** Where a job is: its stage ("open", "layout", "diff", "plan", "verify", "stats") and units. */
struct JobProgress
{
    std::string_view stage;
    uint64_t done = 0, total = 0; ///< total 0: the stage's amount of work is not known
};

/**
 * How a caller follows and stops a job. `progress` is called on the job's threads, serialised,
 * at every stage change and as work moves (the caller throttles what it shows); returning false
 * stops the job as a cancel does.
 */
struct JobControl
{
    std::function<bool(const JobProgress &)> progress;
    CancelToken cancel;

    /** Reports `p`; false when the job must stop. */
    bool report(const JobProgress &p) const;
};

// ---------------------------------------------------------------- inspect

/** An index already open (the GUI keeps its checkpoints open); null: opened from the path. */
using OpenedIndex = std::shared_ptr<const CheckpointIndex>;

struct InspectRequest
{
    std::string path;
    std::vector<std::string> filters;  ///< glob patterns on keys; any may match; none: all
    std::optional<std::string> tensor; ///< only this key
    bool stats = false;   ///< read tensor data: health (statistics, histogram, fingerprint)
    bool hash = false;    ///< read tensor data: SHA-256
    bool objects = false; ///< decode non-tensor entries
    /** With stats: flag values that look like a fresh init (Megatron's init_method_std;
     *  0: do not flag). */
    double initStd = 0.02;
    OpenedIndex opened;
};

struct InspectedTensor
{
    const TensorEntry *entry = nullptr; ///< into InspectResult::index
    std::optional<TensorHealth> health; ///< with stats (our kernels; complex: parts as elements)
    std::string sha256;
    std::string looksInitial; ///< with stats: why the values look freshly initialised, or empty
};

struct InspectedObject
{
    const ObjectEntry *entry = nullptr;
    std::string summary; ///< decoded (objects, or the --tensor key), one line
};

struct InspectResult
{
    std::shared_ptr<const CheckpointIndex> index;
    std::vector<InspectedTensor> tensors; ///< the selected ones, in index order
    std::vector<InspectedObject> objects;
    /** The index's problems, then those met reading data (each key's, with file and offset). */
    std::vector<Problem> problems;
    bool healthy() const { return problems.empty(); }
};

/**
 * The one numerics path of every view: our health kernels (complex included), and libtorch's
 * moments (no histogram) only for the dtypes the kernels lack (float8 fnuz variants, e8m0).
 */
Result<TensorHealth> tensorHealth(const TensorData &data);

/** Opens the checkpoint and reads what the request asks for; errors only when it cannot open. */
Result<InspectResult> runInspect(const InspectRequest &request, const JobControl &control = {});

// ---------------------------------------------------------------- diff

struct DiffRequest
{
    std::string checkpoint;
    std::string layout; ///< layout JSON path (docs/layout-format.md)
    DiffOptions options;
    OpenedIndex opened;
    /** The layout at `layout`, already read (the GUI keeps it across rule toggles: reading
     *  DeepSeek-V3's 10 MB takes 70 ms); null: read from the path. */
    std::shared_ptr<const Layout> openedLayout;
    /** When `openedLayout` was built from a config and `layout` is not written yet: the
     *  command that writes it, which the repair preview runs before its fix (diff --config). */
    std::string layoutCommand;
};

/** Checkpoint against layout: every expected parameter's status and what the real load does. */
Result<DiffResult> runDiff(const DiffRequest &request, const JobControl &control = {});

struct CheckpointDiffRequest
{
    std::string first, second;
    DiffOptions options;
    OpenedIndex firstOpened, secondOpened;
};

/** Checkpoint against checkpoint: added, removed, renamed by a rule, shape or dtype changed. */
Result<CheckpointDiff> runCheckpointDiff(const CheckpointDiffRequest &request,
                                         const JobControl &control = {});

// ---------------------------------------------------------------- values

/** Two checkpoints compared value by value (diff --against --values). */
struct ValueDiffRequest
{
    std::string first, second;
    /** What names the tensors of both sides; empty: a side's saved Megatron arguments or
     *  Hugging Face config where the formats need one, else the first checkpoint's tensors. */
    std::string layout;
    std::vector<std::string> disabledRules;
    double rtol = 0, atol = 0; ///< default: bit-exact
    bool includeOptimizer = true;
    uint64_t maxMemory = 0; ///< both sides' blocks, all threads; 0: a quarter of physical memory
    int threads = 0;        ///< 0: one per core
    bool useGpu = true;
    /** Tensors that cannot be compared do not fail the result (ValueDiffResult::passes()). */
    bool allowNotCompared = false;
    Communicator *comm = nullptr; ///< the job this process is one rank of (joinJob())
    OpenedIndex firstOpened, secondOpened;
    /** The layout at `layout`, already read (or sent along by a remote client); null: read
     *  from the path when one is given. */
    std::shared_ptr<const Layout> openedLayout;
};

/** Every tensor both sides hold, compared in their stored dtypes, streamed under the budget. */
Result<ValueDiffResult> runValueDiff(const ValueDiffRequest &request,
                                     const JobControl &control = {});

/**
 * Two checkpoints in two places (here and a host, or two hosts) compared by each stored
 * tensor's SHA-256, computed where its checkpoint lives (each side's runInspect with `hash`;
 * over ssh only the digests travel, never tensor data). A tensor stored under the same key,
 * dtype and shape on both sides is identical when its digests are and different when they are
 * not (by how much needs both in one place: `differing` is -1); any other is not compared. The
 * result's `method` is "sha256". Rules and layouts do not apply: stored keys are paired as
 * they are.
 */
ValueDiffResult valuesByHash(const InspectResult &first, const InspectResult &second);

// ---------------------------------------------------------------- verify

struct VerifyRequest
{
    std::string checkpoint;
    std::string layout;
    /** Overrides of the layout's parallel configuration; 0 (or -1 for the stage layers): the
     *  layout's. dp 0 under a job of several processes: the processes over tp × pp. */
    int dp = 0, tp = 0, pp = 0, ep = 0, etp = 0;
    int firstStageLayers = -1, lastStageLayers = -1;
    std::vector<std::string> disabledRules;
    uint64_t maxMemory = 0; ///< 0: a quarter of physical memory
    int threads = 0;        ///< 0: one per core
    bool hash = false;
    bool useGpu = true;
    /** The job this process is one rank of (joinJob()); null: one process plays every rank. */
    Communicator *comm = nullptr;
    OpenedIndex opened;
    /** The layout at `layout`, already read (or sent along by a remote client); null: read
     *  from the path. */
    std::shared_ptr<const Layout> openedLayout;
};

struct VerifyReport
{
    std::string checkpoint, layout;
    ParallelConfig parallel; ///< as planned, overrides and defaults applied
    int expertDp = 1;
    uint64_t maxMemory = 0; ///< the budget used
    VerifyResult result;
    /** The load as planned: which rank reads which box of which key (the shard map's overlay). */
    std::shared_ptr<const LoadPlan> plan;
    /** Where the health kernels ran: "cpu", or the GPU's name when any parameter's ran there. */
    std::string healthDevice() const;
};

/**
 * Diff, plan and the real load of every rank's shards, checked bit for bit. A cancel (or a
 * progress callback returning false) ends it early with result.cancelled set.
 */
Result<VerifyReport> runVerify(const VerifyRequest &request, const JobControl &control = {});

/**
 * Joins the job this process was launched into (torchrun, srun), or nullptr when it was not
 * launched as one of several processes.
 */
Result<std::unique_ptr<Communicator>> joinJob(CommBackend backend = CommBackend::Auto);

// ---------------------------------------------------------------- report

struct ReportRequest
{
    /** Exactly one of the two diffs. */
    std::optional<DiffRequest> diff;
    std::optional<CheckpointDiffRequest> against;
    /** With `against`: the value comparison too, as a section of the report. */
    std::optional<ValueDiffRequest> values;
    ReportFormat format = ReportFormat::Markdown;
    ReportContext context;
};

struct ReportOutput
{
    std::string text;  ///< the rendered report
    bool clean = true; ///< the diff behind it found no problem
};

Result<ReportOutput> runReport(const ReportRequest &request, const JobControl &control = {});

// ---------------------------------------------------------------- fix

/**
 * A repaired checkpoint: the keys the failing load asks for (the diff with these options),
 * written as a new `.metadata` whose chunks point at the stored data, beside the untouched
 * source, with its files hard-linked (symlinked where a hard link is impossible; copied with
 * `copy`).
 */
struct FixRequest
{
    std::string checkpoint;
    std::string layout;
    std::string output; ///< must not exist (force: an earlier fix's output is replaced)
    DiffOptions options;
    bool copy = false;
    bool force = false;
    /** Write what can be repaired even when some parameters cannot (they stay unloadable). */
    bool partial = false;
    std::string commandLine; ///< recorded in the manifest
    OpenedIndex opened;
    std::shared_ptr<const Layout> openedLayout;
    /** Metadata this torch reads (shardscope/torchcompat.h): written anew over the same data
     *  when the checkpoint's own is not; without a layout, that is all the fix does. */
    std::optional<TorchVersion> forTorch;
};

/**
 * Diffs as asked and with every rule (where the data is), plans the new keys as references to
 * stored chunks, writes the output only when every parameter can be repaired (or `partial`), and
 * diffs the output as asked. Blockers are in the result, not errors; nothing is written then.
 */
Result<FixResult> runFix(const FixRequest &request, const JobControl &control = {});

// ---------------------------------------------------------------- problems, folded

/**
 * Problems of one cause in one file ("__3_0.distcp is missing: 7,200 keys unreadable"): the
 * same effect, file and message but for its numbers. `cause` keeps the numbers every member
 * shares and shows "…" where they differ.
 */
struct ProblemGroup
{
    Problem::Effect effect = Problem::Effect::Note;
    std::string file;
    std::string cause;
    std::vector<size_t> members; ///< indices into the input, ascending
    /** One line: "FILE: 7200 keys unreadable: data file is missing". */
    std::string headline(const std::vector<Problem> &problems) const;
};

/** Groups in order of first appearance. */
std::vector<ProblemGroup> groupProblems(const std::vector<Problem> &problems);

// ---------------------------------------------------------------- the JSON schemas

/** shardscope.inspect/1 */
std::string inspectToJson(const InspectResult &result, const std::string &path);
/** shardscope.verify/1 */
std::string verifyToJson(const VerifyReport &report);
/** What a clean verification proves, one line each (verify's output says it plainly). */
std::vector<std::string> verifyProves();
/** What it cannot see, and what would (Megatron-LM#2769: chunks misplaced at save time). */
std::vector<std::string> verifyDoesNotProve();
// shardscope.diff/1, shardscope.checkpoint-diff/1 and shardscope.report/1: report.h.

} // namespace shardscope
