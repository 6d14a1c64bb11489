// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/checkpoint.h"
#include "shardscope/layout.h"
#include "shardscope/tensor.h"
#include "shardscope/torchcompat.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardscope {

/** A mapping between what a model holds and what is on disk. Rules can be switched off. */
struct RuleInfo
{
    std::string name;
    std::string description;
    /** Megatron's fsdp_dtensor load applies it (its handlers); otherwise only ShardScope maps it.
     */
    bool appliedByLoader = true;
};
const std::vector<RuleInfo> &allRules();

/** Megatron's --dist-ckpt-strictness values. */
enum class Strictness : uint8_t {
    AssumeOkUnexpected,
    LogUnexpected,
    LogAll,
    RaiseUnexpected,
    RaiseAll,
    ReturnUnexpected,
    ReturnAll,
    IgnoreAll,
};
std::string_view strictnessName(Strictness s);
std::optional<Strictness> strictnessFromName(std::string_view name);

struct DiffSource;

struct DiffOptions
{
    std::vector<std::string> disabledRules;
    Strictness strictness = Strictness::AssumeOkUnexpected;
    /** fsdp_dtensor: --strict-fsdp-dtensor-load (the default; partial loads disallowed). */
    bool strictLoad = true;
    bool includeOptimizer = true;
    /** Read the tensors a load casts to a narrower dtype and measure what the cast changes. */
    bool measureCasts = false;
    /** A cast that loses precision fails the verdict (exit 1), not only warns. */
    bool failOnCast = false;
    /** Read what the load fills each parameter with and flag values that look like a fresh
     *  initialization (health.h initialLikeness): "the experts are still random". */
    bool checkInit = false;
    double initStd = 0.02; ///< Megatron's --init-method-std
    /** Find the data wherever an enabled rule puts it, as if the format's loader ran every
     *  handler: where the values are, not what a particular load asks for (value comparison). */
    bool everyRule = false;
    /** When the load fails: plan what `shardscope-cli fix` would repair (DiffResult::repair);
     *  a second diff with every rule on. */
    bool previewRepair = false;
    /** Threads for the parameters: 0 picks by the layout's size and the machine's cores; 1
     *  evaluates on the caller's thread only. The result is the same either way. */
    int threads = 0;
    /**
     * Whether two stored tensors hold the same values (tied weights both stored: the load
     * keeps one): true, false, or nullopt when it cannot tell. Unset: the diff does not read
     * data and says it did not compare them. The session's runs set it (it reads the files).
     */
    std::function<std::optional<bool>(const DiffSource &, const DiffSource &)> sameValues;
};

enum class LoadStatus : uint8_t {
    Ok,            ///< loadable as is
    Split,         ///< fused in the model, its sections stored as separate keys
    Merge,         ///< stored fused with other parameters; cut out of that key
    Rename,        ///< stored under another name that a rule maps
    Cast,          ///< same shape, other dtype: the load converts
    ShapeMismatch, ///< stored with another shape
    Partial,       ///< stored, but the chunks leave holes
    Unloadable,    ///< nothing on disk to fill it
    Unreadable,    ///< stored, but its data cannot be read: the load raises
    /** The real load fills it silently from a key that holds another parameter's data (another
     *  pipeline stage's layer under stage-local names, another EP rank's experts). */
    WrongSource,
};
std::string_view statusName(LoadStatus s);

/** One on-disk key a parameter draws from, and which rows (along dim) of the parameter. */
struct DiffSource
{
    std::string key;
    std::vector<int64_t> shape; ///< as stored
    std::string dtype;          ///< as stored
    int dim = 0;
    int64_t begin = 0, end = 0; ///< rows of the parameter this key fills ([0, 0) = whole)
    int64_t storedRow = 0;      ///< first row of the stored tensor used (merge: the section)
    /** Leading indices into the stored tensor (torch_dist stacked layer / expert axes). */
    std::vector<int64_t> index;
    /** The key's item in the index the diff read (tensors first, then objects), so that a
     *  caller holding that index finds it without hashing keys; -1: not an item of it. */
    int64_t entry = -1;
};

enum class Section : uint8_t { Model, Optimizer, Other };

struct DiffEntry
{
    Section section = Section::Model;
    std::string name;  ///< parameter's live name (Model) or "<name>.<state>" (Optimizer)
    std::string param; ///< the parameter's live name
    std::string state; ///< optimizer state (exp_avg, …), empty for the model section
    std::vector<int64_t> shape;
    std::string dtype;
    LoadStatus status = LoadStatus::Ok;
    /** A real Megatron load fills it (its handlers apply every rule used). */
    bool realLoadFills = true;
    /** The real load fills it, but from the wrong key (another EP rank's expert). */
    bool wrongSource = false;
    std::vector<std::string> rules; ///< rules used
    std::vector<DiffSource> sources;
    std::vector<std::string> requestKeys; ///< what the real load asks the checkpoint for
    /** Per request key, when the load asks for the parameter in sections: the rows of the
     *  parameter it holds, along `dim` (`key`, `dim`, `begin`, `end` of each; empty when the
     *  load asks for each key whole). */
    std::vector<DiffSource> requestRows;
    /** Keys that hold its data but that the load does not read: the handler that maps them is
     *  switched off or missing from this loader (it keeps its initial values, or the load
     *  raises). */
    std::vector<std::string> unreadKeys;
    std::vector<int64_t> unreadEntries; ///< unreadKeys' items, as DiffSource::entry
    std::string reason;
    std::string fix;
    /** Cast to a floating dtype with fewer exponent or mantissa bits: values may change. */
    bool narrowing = false;
    std::optional<CastLoss> castLoss; ///< measured (DiffOptions::measureCasts)
    /** DiffOptions::checkInit: why the values the load fills it with look freshly initialised
     *  (every source does), or empty. */
    std::string looksInitial;
    /** Not stored, but tied to this parameter (one tensor), which the load fills: its values
     *  are right, though a strict load still names it missing. */
    std::string tiedTo;
};

/**
 * Whether a load fills `e` the wrong way or not at all: what the real load does not fill (or
 * fills from another parameter's key), and a cast to fewer bits not measured to keep every
 * value. What it fills as the layout asks (ok, split, merge, rename, a cast that keeps every
 * value) is the rules working. The one definition the CLI's text, the reports and the window
 * count problems by.
 */
bool isLoadProblem(const DiffEntry &e);

/** A checkpoint key no expected parameter consumes (a plain DCP load ignores it silently). */
struct UnconsumedKey
{
    std::string key;
    std::vector<int64_t> shape;
    std::string dtype;
    bool tensor = true;
    std::string note;   ///< e.g. "optimizer state of a parameter the model does not have"
    int64_t entry = -1; ///< its item in the index, as DiffSource::entry
    /** Its values equal a tensor the load reads (a tied output layer saved beside its
     *  embedding): leaving it out loses nothing. */
    bool redundant = false;
};

/** What the real load would do under the chosen strictness. */
struct LoadOutcome
{
    enum class Action : uint8_t { Loads, Raises, LogsAndContinues, ReturnsAndContinues, Silent };
    Action action = Action::Loads;
    std::string message;                 ///< what Megatron would raise or log
    std::vector<std::string> namedKeys;  ///< keys named in the exception/log (Megatron's cap)
    std::vector<std::string> keptAtInit; ///< parameters left at their initial values
    std::vector<std::string> optimizerKeptAtInit; ///< optimizer states left at init (partial load)
    std::vector<std::string> loadedWrong;         ///< filled silently from the wrong key (any mode)
    /** What loads but changes: casts that lose precision, with the worst measured change. */
    std::vector<std::string> warnings;
};
std::string_view actionName(LoadOutcome::Action a);

/** What `fix` would do for a failing load (DiffOptions::previewRepair). */
struct RepairPreview
{
    std::string command;     ///< the fix command line; empty when the format has no fix yet
    std::string unsupported; ///< why there is no command
    /** Keys it writes, per kind ("rename", "concatenate", "split", "select", "drop"). */
    std::vector<std::pair<std::string, size_t>> changes;
    /** What it cannot repair, one line each ("PARAM: why"): nothing is written then without
     *  --partial. */
    std::vector<std::string> blockers;
    /** What it writes of tensor data where that is not references (torch.save, safetensors and
     *  legacy Megatron outputs write their files anew); empty: new metadata over the stored data
     *  (and any "rewrite" keys copied into one new data file). */
    std::string dataWritten;
};

struct DiffResult
{
    std::string checkpoint;         ///< path
    std::string against;            ///< layout or second checkpoint path
    std::string format;             ///< checkpoint format name
    TorchReadability torchReadable; ///< which torch reads its metadata (DCP-based formats)
    DiffOptions options;
    std::vector<DiffEntry> entries;
    std::vector<UnconsumedKey> unconsumed;
    LoadOutcome outcome;
    size_t expectedModel = 0, loadableModel = 0;
    size_t expectedOptimizer = 0, loadableOptimizer = 0;
    /** Parameters and states a load casts with a loss (measured, or possible when not). */
    size_t lossyCasts = 0;
    std::optional<RepairPreview> repair;
    /** Nothing a real load misses, raises on, or fills wrongly (casts are warnings). */
    bool clean() const;
    /** clean(), and no lossy cast when options.failOnCast. */
    bool passes() const { return clean() && !(options.failOnCast && lossyCasts); }
};

/** Fills lossyCasts and the cast warning of `diff` from its entries (measured or not). */
void summariseCasts(DiffResult &diff);

/** `progress(done, total)` now and then; returning false stops the diff (Error::Cancelled). */
Result<DiffResult>
diffAgainstLayout(const CheckpointIndex &checkpoint, const Layout &layout,
                  const DiffOptions &options,
                  const std::function<bool(uint64_t done, uint64_t total)> &progress = {});

/** The same, for an index the caller shares: what the diff sorts of its keys is kept while the
 *  index lives, for the next diff of it (a rule toggled in the window diffs it again). */
Result<DiffResult>
diffAgainstLayout(const std::shared_ptr<const CheckpointIndex> &checkpoint, const Layout &layout,
                  const DiffOptions &options,
                  const std::function<bool(uint64_t done, uint64_t total)> &progress = {});

/** Checkpoint against checkpoint. */
struct KeyChange
{
    enum class Kind : uint8_t { Added, Removed, Renamed, ShapeChanged, DtypeChanged };
    Kind kind;
    std::string key;      ///< in the first checkpoint (Removed, Renamed, …) or the second (Added)
    std::string otherKey; ///< Renamed: the key in the second checkpoint
    std::string rule;     ///< Renamed: the rule that maps them
    std::string detail;
};
std::string_view changeName(KeyChange::Kind k);

struct CheckpointDiff
{
    std::string first, second;
    TorchReadability firstTorch, secondTorch; ///< which torch reads each one's metadata
    size_t same = 0;
    std::vector<KeyChange> changes;
    /** Nothing changed but names a rule maps. */
    bool clean() const;
};
/** `progress` is called every few thousand keys (at DeepSeek-V3 scale, 1.3 M keys take
 *  seconds); when it returns false the diff stops and what it returns is incomplete. */
CheckpointDiff
diffCheckpoints(const CheckpointIndex &a, const CheckpointIndex &b, const DiffOptions &options,
                const std::function<bool(uint64_t done, uint64_t total)> &progress = {});

} // namespace shardscope
