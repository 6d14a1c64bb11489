// SPDX-License-Identifier: MIT
// The load diff's evaluator, private to diff/: what a model expects (a Layout) against what a
// checkpoint holds, through the rules of Megatron's fsdp_dtensor handlers (docs/formats.md §6)
// and a few that only we apply. One class, its stages in files of their own:
//   differ.cpp    what the stored keys say as a whole (set up once, before any parameter)
//   matcher.cpp   a parameter's stored keys, through the rules (rulemap.h builds the requests)
//   evaluate.cpp  one parameter: found, under other names, or missing, and why
//   fanout.cpp    the parameter loops, over threads
//   assemble.cpp  what nobody asked for, and the load's outcome
//   diff.cpp      the orchestrator (diffAgainstLayout)
#pragma once

#include "shardscope/diff.h"

#include "diff/diskkeys.h"
#include "diff/keycache.h"
#include "diff/namedcauses.h"
#include "diff/rulemap.h"

#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace shardscope::detail {

// What one thread's evaluations keep between calls: the Differ's parameters are evaluated on
// several threads at once (Differ::run), each with its own.
struct Scratch
{
    std::vector<std::vector<int64_t>> lead; // per piece of the last lookup: stacked indices
    // torch_dist: the lookups find the data in whichever form of sharded keys holds it (layers
    // or experts stacked or not), not only the form the load asks for.
    bool anyForm = false;
    bool otherForm = false;           // the last torch_dist lookup found another form
    std::pair<bool, bool> storedForm; // its layers and experts stacked
    std::string key;                  // Disk::findOptimizer's
    // A request for the last parameter evaluateParam saw (what it reads of p is kept to
    // compare): the optimizer's states ask for it again, each.
    struct CachedRequest
    {
        std::string name, absorbs;
        std::vector<int64_t> shape;
        std::optional<Fusion> fusion;
        Request request;
        bool valid = false;
        bool holds(const LayoutParam &p) const
        {
            return valid && name == p.name && shape == p.shape && absorbs == p.absorbs &&
                   fusion == p.fusion;
        }
        void keep(const LayoutParam &p, Request q)
        {
            request = std::move(q);
            name = p.name;
            shape = p.shape;
            absorbs = p.absorbs;
            fusion = p.fusion;
            valid = true;
        }
    };
    CachedRequest cached; ///< request(p, false)
    /** request(p, true): what a loader with every handler asks for, looked up for each state of
     *  a parameter the load does not find (half of them with a fused rule off). */
    CachedRequest ideal;
};

/** This thread's Scratch: forEachIndex gives each of its threads one, Differ::run the caller's. */
Scratch &scratch();

/** Makes `own` this thread's Scratch while it lives. */
class ScratchScope
{
public:
    explicit ScratchScope(Scratch &own);
    ~ScratchScope();
    ScratchScope(const ScratchScope &) = delete;
    ScratchScope &operator=(const ScratchScope &) = delete;

private:
    Scratch *m_outer;
};

/** A stored key's flags are set by whichever thread finds it, and read after they all end. */
void mark(bool &flag);

/**
 * Runs fn(i) for every i < n on `workers` threads (the caller's among them), each with its own
 * Scratch, in blocks claimed in order; after each block of its own the caller asks
 * keepGoing(done). False when it said no (the others stop at their next block).
 */
bool forEachIndex(size_t n, unsigned workers, const std::function<void(size_t)> &fn,
                  const std::function<bool(size_t done)> &keepGoing);

class Differ
{
public:
    /** Progress counts parameters twice over: the model section's pass, then the optimizer's. */
    using Progress = std::function<bool(uint64_t, uint64_t)>;

    /** `shared`: `index` as its owner shares it (the sorted keys are kept for the next diff of
     *  it, keycache.h), or null. */
    Differ(const CheckpointIndex &index, const Layout &layout, const DiffOptions &options,
           const std::shared_ptr<const CheckpointIndex> &shared = nullptr);
    /** The diff; nullopt when progress said stop. */
    std::optional<DiffResult> run(const Progress &progress);

private:
    struct Expanded
    {
        LayoutParam param;
        std::string localName; // EP-local name, for layouts of one EP rank
        int epRank = 0;
    };

    // --- set-up (differ.cpp) ---
    // torch.save and safetensors files are loaded with nn.Module.load_state_dict.
    bool stateDictLoad() const;

    bool enabled(std::string_view rule) const;

    // Whether the load asks for the layers stacked (decoder.layers.<name> with a layer axis).
    bool stackedRequest() const { return m_torchDist && m_form.layersStacked; }

    // --- torch_dist's sharded keys (torchdist.cpp) ---
    // How megatron-core's sharded_state_dict names what a load asks for: decoder layers stacked
    // under one key with a layer axis or one key per layer (non_homogeneous_layers), routed
    // experts stacked with an expert axis or one key per expert (singleton_local_shards, which
    // also keeps SwiGLU's halves apart as _w / _v). Two facts, decided apart (docs/formats.md
    // §5.3.2): the layers by the model, the experts by the checkpoint's content metadata.
    struct TorchDistForm
    {
        bool layersStacked = true, expertsStacked = true;
        bool operator==(const TorchDistForm &) const = default;
    };
    struct ShardedName
    {
        std::string key;
        std::vector<int64_t> lead,
            leadSizes; ///< the piece's index on the stacked axes, their sizes
    };
    void setUpTorchDist();
    ShardedName shardedName(const std::string &name, TorchDistForm form) const;
    // The forms a lookup tries: the load's; every form where scratch().anyForm or everyRule.
    std::vector<TorchDistForm> lookupForms() const;
    bool lookupTorchDist(const Request &q, const std::string &state, std::vector<DiskKey *> &found);
    // Why the form of the load's request differs from where the data is (evaluate's step 2).
    // `swigluHalves`: the data is there with SwiGLU's halves in the other form (fused or apart).
    void formMismatch(DiffEntry &e, const std::vector<DiskKey *> &found, bool swigluHalves) const;
    // "layers stacked, experts stacked" and why the load asks so.
    std::string formText(TorchDistForm f) const;

    // A stored key's item in the index: sortKeys() numbers them as the index does.
    int64_t entryOf(const DiskKey *k) const { return k - m_disk.keys.data(); }

    // What the stored keys say about the checkpoint as a whole (keys are numbered as
    // detail::sortKeys numbers them: tensors, then objects).
    void scanKeys(SortedKeys &sorted) const;

    // A plain DCP directory is a flat state dict when the model's names are stored as they are
    // (torchtitan, or a state dict of Hugging Face names): `model.` is then no wrapper.
    bool literalNames() const;

    // Megatron's legacy torch format: one torch.save per rank, mp_rank_<tp>[_<pp>][_<ep>]/
    // model_optim_rng.pt, holding that rank's module state_dict (TP-local shapes, layer names
    // local to the stage, expert indices local to the EP rank) under `model`.
    void setUpLegacy();

    // A legacy rank file holds its stage's layers under stage-local numbers: the stage of a live
    // name, and the name as that stage's file spells it.
    std::pair<int, std::string> legacyStageLocal(const std::string &name) const;

    std::string legacyDir(int tp, int stage, int ep) const;

    // The stage that holds decoder layer `layer` (m_stageEnds set, layer >= 0).
    size_t stageOf(int layer) const;

    // Under stage-local names (m_stageEnds set): the first layer of the stage that holds
    // decoder layer `layer`, which that stage calls layer 0.
    int stageOffset(int layer) const;

    // --- the parameter loops (fanout.cpp) ---
    // Threads for the parameter loops: each parameter's evaluation reads the index and the
    // layout and sets stored keys' flags; the legacy format's also notes the rank files read.
    unsigned workers() const;

    // Megatron-FSDP keeps each parameter's optimizer group (lr, weight decay, …) as
    // optimizer.param_to_group_meta.<live name>.* items: one entry per parameter says whether its
    // group is there. Names are the live ones (the split handlers rename only optimizer.state).
    void paramGroups(DiffResult &r, unsigned threads);

    /** Fills the model section's entries; false when progress said stop. */
    bool evaluateModel(DiffResult &r, const Progress &progress, unsigned threads);
    /** Each parameter's place among those with optimizer state (UINT32_MAX: none); `count`
     *  of them. */
    std::vector<uint32_t> optimizerSlots(uint32_t &count) const;
    /** Fills the optimizer section's entries (each parameter's states); false on stop. */
    bool evaluateOptimizer(DiffResult &r, const Progress &progress, unsigned threads);

    // --- matching a parameter's stored keys (matcher.cpp) ---
    static bool byLoader(const std::string &rule);

    // What the loader asks for, given which rules it has (rulemap.h).
    // torch_dist: SwiGLU's halves `swigluHalves` apart (default: as singleton_local_shards says).
    Request request(const LayoutParam &p, bool allRules,
                    std::optional<bool> swigluHalves = std::nullopt) const;

    DiskKey *find(const std::string &name, const std::string &state);

    std::string requestKey(const std::string &name, const std::string &state) const;

    // The keys a request asks for and, for a parameter asked for in sections, their rows.
    void setRequest(DiffEntry &e, const Request &q, const std::string &state) const;

    // Looks every piece up; fills sources. False if any is missing.
    bool lookup(const Request &q, const std::string &state, std::vector<DiskKey *> &found);

    // torch_dist stacks layers ([L, …] under `decoder.layers.x`) and experts ([E, …] under
    // `mlp.experts.experts.linear_fcN.weight`, per layer when the block is not homogeneous); a
    // parameter is one index of those axes.
    DiskKey *findStacked(const std::string &name, const std::string &state,
                         std::vector<int64_t> &lead);

    void fillSources(DiffEntry &e, const Request &q, const std::vector<DiskKey *> &found);

    // The same pieces under other names, by a rule only ShardScope applies: the data is there,
    // the real load asks for other keys.
    template<typename Rename>
    bool underOtherNames(DiffEntry &e, const Request &q, const std::string &state, const char *rule,
                         Rename rename, const std::string &why, const std::string &fix);

    // Keys saved through a wrapper module: DDP and DataParallel put `module.` before every
    // name, torch.compile `_orig_mod.`, FSDP (1) `_fsdp_wrapped_module.` and checkpoint_wrapper
    // `_checkpoint_wrapped_module.` at every module they wrap; nn.Module.load_state_dict and
    // dcp.load strip none of them.
    static std::string unwrappedName(std::string_view key);

    /**
     * Mappings only ShardScope makes (the data is there; the loader will not find it), in the
     * order they are tried: rules.cpp's table names them, matcher.cpp's kOtherNameRules runs
     * them. True when one explained the parameter (e is filled).
     */
    bool matchOtherNames(DiffEntry &e, const LayoutParam &p, const Request &q,
                         const std::string &state);

    // MTP checkpoints spelled mtp_model_layer (converter output, saves before #6271).
    bool mtpSpelling(DiffEntry &e, const LayoutParam &p, const Request &q,
                     const std::string &state);

    bool expertsForm(DiffEntry &e, const LayoutParam &p, const Request &q,
                     const std::string &state);

    // Fused (unsplit) tensors on disk: a fused parameter stored whole under its own name, or an
    // unfused parameter that is a section of a fused stored tensor.
    bool fusedOnDisk(DiffEntry &e, const LayoutParam &p, const Request &q,
                     const std::string &state);

    bool savedPrefix(DiffEntry &e, const LayoutParam &p, const Request &q,
                     const std::string &state);

    // saved_prefix's and key_prefix's views of the stored names, found once.
    void findWrappers();
    // Where those rules (when on) say `name` is stored, each with its rule: the look-ups of
    // another rule (fused_on_disk) under a wrapper's prefix.
    std::vector<std::pair<std::string, const char *>> wrappedNames(const std::string &name);

    // A prefix on every stored key that the model's names lack, or the reverse (a base model's
    // state dict for a model that keeps it under model.): found once from all the names.
    bool keyPrefix(DiffEntry &e, const LayoutParam &p, const Request &q, const std::string &state);

    // An output layer saved tied to the embedding (one tensor, stored once) for a model that
    // unties them: the embedding's bytes are the output layer's values.
    bool tiedOutput(DiffEntry &e, const LayoutParam &p, const Request &q, const std::string &state);

    // A key a shard index lists that its shard did not give: the shard is missing or
    // unreadable (the load raises on it), or it does not hold the key (the key is missing).
    bool listedButUnreadable(DiffEntry &e, const LayoutParam &p, const Request &q,
                             const std::string &state);

    // Optimizer state saved by position (a raw Optimizer.state_dict() given to dcp.save:
    // optimizer.state.<i>.exp_avg) for a load that asks by name (get_optimizer_state_dict):
    // position i is the model's i-th parameter with optimizer state when every shape agrees.
    bool optimizerIndex(DiffEntry &e, const LayoutParam &p, const Request &q,
                        const std::string &state);
    // A PEFT-wrapped model (base_model.model.…, each LoRA module's weight under base_layer.)
    // against the plain model's checkpoint (pytorch/torchtitan#2945, huggingface/peft#3000).
    bool peftBaseLayer(DiffEntry &e, const LayoutParam &p, const Request &q,
                       const std::string &state);
    void findOptimizerIndices();

    // --- evaluating one parameter (evaluate.cpp) ---
    DiffEntry evaluate(const Expanded &x, const std::string &state);

    // What the load finds for the names as given (no stage-local renaming left to do).
    DiffEntry evaluateNamed(const Expanded &x, const std::string &state);

    DiffEntry evaluateParam(const LayoutParam &p, const std::string &state);

    // A decoder layer past the first stage, asked for by its stage-local name: what that key
    // holds is another layer's data, or nothing.
    DiffEntry evaluateStageLocal(const Expanded &x, const std::string &state, int layer,
                                 int offset);

    DiffEntry evaluateLegacy(const Expanded &x, const std::string &state);

    // The `_extra_state`s the load asks for, by live name, in the order their parameters come:
    // the linears' (TE's, and Megatron's own, which keep one for compatibility) and, with
    // Transformer Engine, every attention's core_attention (TEDotProductAttention). Routed
    // experts' only in torch_dist, where their sharded keys are SequentialMLP's and
    // TEGroupedMLP's alike (`…local_experts.<e>.linear_fcN._extra_state`, grouped
    // `…experts.linear_fcN._extra_state<e>`); the other formats' are left out.
    std::vector<std::string> teModules() const;

    // What the load asks for an `_extra_state`: a state dict key (legacy torch, torch.save, DCP)
    // or, in torch_dist, a ShardedObject `<sharded key>/shard_<offsets>_<sizes>` on its stacked
    // axes (`shard_0_1` without any).
    DiffEntry evaluateExtraState(const std::string &name);

    // A dense expert weight the checkpoint keeps quantized (gpt-oss's MXFP4 _blocks/_scales):
    // the cause named, the stored pair explained. False when it is not that.
    bool quantizedExperts(DiffEntry &e, const LayoutParam &p);

    // A parameter nothing provides, under any name, whose cause its name and the stored keys
    // show: saved from a PEFT model unmerged, a LoRA adapter of a wrapped model, a setting that
    // adds it, Megatron's legacy GroupedMLP against SequentialMLP experts, a layer past the
    // checkpoint's depth. False when none applies (the generic advice stays).
    bool missingCause(DiffEntry &e, const LayoutParam &p);

    // Shape, dtype and coverage of found pieces → status.
    void judge(DiffEntry &e, const Request &q, const std::vector<DiskKey *> &found,
               const std::string &state, LoadStatus mapped);

    // One parameter's param_group entry (reads the index and the layout only: any thread).
    DiffEntry groupEntry(const LayoutParam &p, const std::string &firstLeaf) const;

    // --- tied weights (ties.cpp) ---
    /** A tie's names that the load asks for: the one not stored is filled through the tie,
     *  each stored one whose values differ from the one read last loses them. */
    void applyTies(DiffResult &r);
    /** A stored key the tied model has no weight for: whether its values are lost. */
    void noteTiedUnconsumed(DiffResult &r);
    std::optional<bool> sameStored(const DiffSource &a, const DiffSource &b) const;
    /** Per entry, where dcp.load reads it: its file's rank, then its place (model entries). */
    std::vector<std::pair<size_t, size_t>> dcpReadOrder(const DiffResult &r) const;

    // --- assembly (assemble.cpp) ---
    /** The stored keys no entry explained, each with what it likely is. */
    void collectUnconsumed(DiffResult &r);
    /** What the real load does with all of it (loadoutcome.h), and the cast summary. */
    void assembleOutcome(DiffResult &r);

    // What a stored tensor nobody asks for is, when its name or shape says: a layer past the
    // model's depth, or all experts stacked where the model asks for one key per expert
    // (Megatron-LM#5844; NVIDIA-NeMo/Automodel#2595's grouped 3-D experts). Empty otherwise.
    std::string shapeNote(std::string_view key, const TensorEntry &t) const;

    // Why no stage reads a stored decoder layer under stage-local names; empty otherwise.
    std::string stageLocalNote(std::string_view key) const;

    // A stored output layer that the model does not ask for because it ties it to an embedding
    // it does ask for: saved untied, loaded tied.
    std::string untiedOutputNote(std::string_view key) const;

    // Whether an optimizer key names a parameter of the layout (stacked names included).
    bool optimizerStateOfKnownParam(std::string_view key);

    // Whether an unread key of a legacy checkpoint is worth listing, with its note: only the
    // files' `model` entries, and other TP ranks' copies of what TP rank 0 was checked for
    // are read by those ranks.
    bool legacyUnconsumed(std::string_view key, std::string &note) const;

    // torch_dist asks for a stacked key with the model's layer count as its global shape; a
    // checkpoint stacked over another count fails megatron-core's check of global shapes before
    // any strictness applies. The first such key in the model's order, as megatron-core names it.
    std::string globalShapeMismatch(const DiffResult &r) const;

    const CheckpointIndex &m_index;
    const Layout &m_layout;
    const DiffOptions &m_options;
    std::shared_ptr<const SortedKeys> m_sorted; ///< the keys as sorted for every run
    Disk m_disk;                                ///< this run's copy, its keys marked
    std::vector<Expanded> m_params;
    std::unordered_map<std::string, const LayoutParam *> m_byName;
    /** optimizerStateOfKnownParam: the names with their layer index dropped (built once). */
    std::unordered_set<std::string> m_stackedNames;
    bool m_torchDist = false;
    bool m_megatronLoader = false;       ///< the format's loader runs Megatron's handlers
    bool m_fsdpDtensorLoad = false;      ///< detail::fsdpDtensorLoad(index)
    bool m_legacy = false;               ///< Megatron's legacy torch format: one file per rank
    int m_tpDim = -1, m_tpLocalSize = 1; ///< while judging TP-local shards (legacy)
    std::set<std::string> m_legacyDirs, m_legacyDirsRead; ///< rank directories there, read
    std::vector<std::string> m_legacyMissingFiles;        ///< rank files the load needs, absent
    std::vector<int> m_legacyStageEnds;
    TorchDistForm m_form;         ///< what the torch_dist load asks for
    bool m_singleton = false;     ///< content_metadata.singleton_local_shards
    std::string m_layersWhy;      ///< why the load asks for the layers so
    bool m_layersAssumed = false; ///< the layout does not say: taken from the checkpoint
    std::unordered_map<std::string, int64_t> m_blockLayers; ///< "…decoder.layers." → its layers
    int64_t m_experts = 0;                  ///< routed experts per layer (the expert axis)
    std::vector<std::string> m_tieWarnings; ///< ties whose values were not compared
    /** saved_prefix: a stored name with its wrappers' components removed → the stored name. */
    std::unordered_map<std::string, std::string> m_unwrapped;
    std::once_flag m_unwrappedOnce;
    /** key_prefix: the prefix on every stored key, or on every name of the model's. */
    std::optional<detail::KeyPrefix> m_keyPrefix;
    std::once_flag m_keyPrefixOnce;
    /** optimizer_index: parameter name → its position in a raw optimizer state dict. */
    std::unordered_map<std::string, std::string> m_optimizerIndex;
    std::string m_optimizerIndexWhy; ///< set when the states are kept by position
    std::once_flag m_optimizerIndexOnce;
    /** missingCause: per "…layers." stem, the decoder layers the stored keys number. */
    std::unordered_map<std::string, int> m_storedLayers;
    std::once_flag m_storedLayersOnce;
    /** Keys listed by a shard index whose file is missing or unreadable (no tensor). */
    std::unordered_map<std::string, const Problem *> m_keyProblems;
    std::vector<int> m_stageEnds; ///< set when the load names decoder layers per stage
    int m_maxStageLayers = 0;     ///< the most layers a stage holds (its local names' range)
    int m_decoderLayers = 0;      ///< the model's
};

} // namespace shardscope::detail
