// SPDX-License-Identifier: MIT
// The load diff: what a model expects (a Layout) against what a checkpoint holds, through the
// rules of Megatron's fsdp_dtensor handlers (docs/formats.md §6) and a few that only we apply.
#include "shardscope/diff.h"
#include "shardscope/escape.h"

#include "common/shapes.h"
#include "diff/causes.h"
#include "diff/diskkeys.h"
#include "diff/loadoutcome.h"
#include "diff/namedcauses.h"
#include "diff/rulemap.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace shardscope {

using detail::Disk;
using detail::DiskKey;
using detail::handlerOf;
using detail::kKnownStates;
using detail::modelWrapperLength;
using detail::Piece;
using detail::replaceAll;
using detail::Request;
using detail::shapeText;
using detail::withExpert;

namespace {

// What one thread's evaluations keep between calls: the Differ's parameters are evaluated on
// several threads at once (Differ::run), each with its own.
struct Scratch
{
    std::vector<std::vector<int64_t>> lead; // per piece of the last lookup: stacked indices
    std::string key;                        // Disk::findOptimizer's
    // request(p, false) of the last parameter evaluateParam saw (what it reads of p is kept to
    // compare): the optimizer's states ask for it again, each.
    struct
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
    } cached;
};
thread_local Scratch *t_scratch = nullptr;

// A stored key's flags are set by whichever thread finds it, and read after they all end.
void mark(bool &flag)
{
    std::atomic_ref<bool>(flag).store(true, std::memory_order_relaxed);
}

// Runs fn(i) for every i < n on `workers` threads (the caller's among them), each with its own
// Scratch, in blocks claimed in order; after each block of its own the caller asks
// keepGoing(done). False when it said no (the others stop at their next block).
bool forEachIndex(size_t n, unsigned workers, const std::function<void(size_t)> &fn,
                  const std::function<bool(size_t done)> &keepGoing)
{
    // Blocks small enough that every thread gets several (progress and cancel come per block).
    const size_t kBlock = std::clamp<size_t>(n / (8 * size_t(std::max(workers, 1u))), 1, 64);
    std::atomic<size_t> next{0}, done{0};
    std::atomic<bool> stop{false};
    std::exception_ptr failure;
    std::mutex failureMutex;
    auto work = [&](bool caller) {
        Scratch own;
        Scratch *outer = std::exchange(t_scratch, &own);
        try {
            for (size_t b = next.fetch_add(kBlock); b < n && !stop.load(std::memory_order_relaxed);
                 b = next.fetch_add(kBlock)) {
                for (size_t i = b; i < std::min(n, b + kBlock); ++i)
                    fn(i);
                const size_t length = std::min(n, b + kBlock) - b;
                const size_t d = done.fetch_add(length) + length;
                if (caller && keepGoing && !keepGoing(d))
                    stop = true;
            }
        } catch (...) {
            std::lock_guard lock(failureMutex);
            failure = failure ? failure : std::current_exception();
            stop = true;
        }
        t_scratch = outer;
    };
    std::vector<std::thread> threads;
    try {
        for (unsigned w = 1; w < workers && w * kBlock < n; ++w)
            threads.emplace_back(work, false);
    } catch (const std::system_error &) { // no more threads to be had: fewer do it
    }
    work(true);
    for (std::thread &t : threads)
        t.join();
    if (failure)
        std::rethrow_exception(failure);
    // The other threads may have taken every block: the caller asks at least once.
    return !stop.load() && (!keepGoing || keepGoing(n));
}

class Differ
{
    struct Expanded
    {
        LayoutParam param;
        std::string localName; // EP-local name, for layouts of one EP rank
        int epRank = 0;
    };

public:
    Differ(const CheckpointIndex &index, const Layout &layout, const DiffOptions &options)
        : m_index(index)
        , m_layout(layout)
        , m_options(options)
    {
        // Two passes over every key (650,000 at DeepSeek-V3 scale), side by side.
        const bool literal = literalNames();
        forEachIndex(2, 2,
                     [&](size_t i) {
                         if (i == 0)
                             detail::sortKeys(index, enabled("wrapper_prefix"), m_disk, literal);
                         else
                             scanKeys();
                     },
                     {});
        m_torchDist = index.format == Format::MegatronTorchDist;
        // Only Megatron's torch_dist and fsdp_dtensor loads run the split/rename handlers; the
        // others ask for the live names as they are.
        m_fsdpDtensorLoad = detail::fsdpDtensorLoad(index);
        m_megatronLoader = m_torchDist || m_fsdpDtensorLoad;
        // An EP-local layout (one EP rank's names) stands for every EP rank: expand its experts
        // to global indices, remembering each one's local name and rank.
        const int ep = layout.parallel.ep;
        const bool expand = !layout.expertsGlobal && ep > 1 && layout.numExperts % ep == 0;
        const int local = expand ? layout.numExperts / ep : 0;
        for (const LayoutParam &p : layout.params) {
            if (!expand || p.expert < 0) {
                m_params.push_back({p, {}, 0});
                continue;
            }
            for (int r = 0; r < ep; ++r) {
                Expanded x{p, p.name, r};
                const int global = p.expert + r * local;
                x.param.name = withExpert(p.name, global);
                x.param.expert = global;
                if (x.param.fusion)
                    for (FusedSection &sec : x.param.fusion->sections)
                        sec.name = withExpert(sec.name, global);
                m_params.push_back(std::move(x));
            }
        }
        for (const Expanded &x : m_params) {
            m_byName.emplace(x.param.name, &x.param);
            m_decoderLayers = std::max(m_decoderLayers, decoderLayerOf(x.param.name) + 1);
        }
        m_legacy = index.format == Format::MegatronLegacy;
        if (m_legacy)
            setUpLegacy();
        // Keys a shard index lists whose file is missing or unreadable: no tensor to find.
        // One pass over the tensors, not a search per problem (a missing DCP data file names
        // thousands of keys, all of them tensors).
        for (const Problem &pr : index.problems)
            if (pr.effect == Problem::Effect::Unreadable && !pr.key.empty())
                m_keyProblems.emplace(pr.key, &pr);
        if (!m_keyProblems.empty())
            for (const TensorEntry &t : index.tensors)
                m_keyProblems.erase(t.key);
        // Megatron-FSDP names decoder layers per pipeline stage (NVIDIA/Megatron-LM#7452): a
        // model split over pp stages asks for decoder.layers.0… on every stage.
        if (!m_legacy && layout.parallel.pp > 1 &&
            stageLocalLayerNames(layout, formatName(index.format)))
            if (auto ends = decoderStageEnds(layout)) {
                m_stageEnds = std::move(*ends);
                for (size_t st = 0; st < m_stageEnds.size(); ++st)
                    m_maxStageLayers = std::max(m_maxStageLayers,
                                                m_stageEnds[st] - (st ? m_stageEnds[st - 1] : 0));
            }
    }

    // torch.save and safetensors files are loaded with nn.Module.load_state_dict.
    bool stateDictLoad() const
    {
        return m_index.format == Format::TorchSave || m_index.format == Format::Safetensors ||
               m_index.format == Format::SafetensorsIndex ||
               m_index.format == Format::TorchSaveIndex;
    }

    // A stored output layer that the model does not ask for because it ties it to an embedding
    // it does ask for: saved untied, loaded tied.
    std::string untiedOutputNote(std::string_view key) const
    {
        for (const std::string &emb : detail::tiedEmbeddingsOf(key))
            if (m_byName.count(emb))
                return "the checkpoint's output layer has weights of its own (saved untied); "
                       "this model ties it to " +
                       emb +
                       " and does not load it: build the model untied (tie_word_embeddings: "
                       "false, --untie-embeddings-and-output-weights) to keep them";
        return {};
    }

    // A stored key's item in the index: sortKeys() numbers them as the index does.
    int64_t entryOf(const DiskKey *k) const { return k - m_disk.keys.data(); }

    // This thread's (see forEachIndex; run() gives the caller's thread one).
    static Scratch &scratch() { return *t_scratch; }

    // What the stored keys say about the checkpoint as a whole (keys are numbered as
    // detail::sortKeys numbers them: tensors, then objects).
    void scanKeys()
    {
        uint32_t i = 0;
        auto scan = [&](std::string_view k) {
            if (k.find("._extra_state") != std::string_view::npos) {
                m_extraStateKeys.emplace(std::string(k), i);
                m_extraStateKeys.emplace(std::string(k.substr(modelWrapperLength(k))), i);
            }
            if (!m_stackedLayers) {
                const size_t at = k.find("decoder.layers.");
                if (at != std::string_view::npos && at + 15 < k.size() &&
                    !std::isdigit(static_cast<unsigned char>(k[at + 15])))
                    m_stackedLayers = true;
            }
            // What findStacked() can find: a layer axis (".layers." then a name) or an expert one.
            if (!m_mayBeStacked) {
                for (size_t l = k.find(".layers."); l != std::string_view::npos;
                     l = k.find(".layers.", l + 1))
                    if (l + 8 < k.size() && !std::isdigit(static_cast<unsigned char>(k[l + 8])))
                        m_mayBeStacked = true;
                if (k.find(".mlp.experts.experts.linear_fc") != std::string_view::npos)
                    m_mayBeStacked = true;
            }
            ++i;
        };
        for (const TensorEntry &t : m_index.tensors)
            scan(t.key);
        for (const ObjectEntry &o : m_index.objects)
            scan(o.key);
    }

    // A plain DCP directory is a flat state dict when the model's names are stored as they are
    // (torchtitan, or a state dict of Hugging Face names): `model.` is then no wrapper.
    bool literalNames() const
    {
        if (m_index.format != Format::Dcp)
            return false;
        std::unordered_set<std::string_view> keys;
        for (const TensorEntry &t : m_index.tensors)
            keys.insert(t.key);
        size_t hits = 0, tried = 0;
        for (const LayoutParam &p : m_layout.params) {
            hits += keys.count(p.name);
            if (++tried == 256)
                break;
        }
        return hits > 0;
    }

    // Progress counts parameters twice over: the model section's pass, then the optimizer's.
    using Progress = std::function<bool(uint64_t, uint64_t)>;

    std::optional<DiffResult> run(const Progress &progress)
    {
        Scratch mine; // for what runs on this thread outside forEachIndex
        Scratch *outer = std::exchange(t_scratch, &mine);
        std::optional<DiffResult> r = runHere(progress);
        t_scratch = outer;
        return r;
    }

private:
    // Threads for the parameter loops: each parameter's evaluation reads the index and the
    // layout and sets stored keys' flags; the legacy format's also notes the rank files read.
    unsigned workers() const
    {
        if (m_legacy)
            return 1;
        if (m_options.threads > 0)
            return unsigned(m_options.threads);
        return m_params.size() < 4096 ? 1u
                                      : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
    }

    std::optional<DiffResult> runHere(const Progress &progress)
    {
        DiffResult r;
        r.options = m_options;
        r.format = std::string(formatName(m_index.format));
        r.checkpoint = m_index.inputPath;
        const unsigned threads = workers();
        const uint64_t total = 2 * m_params.size();
        // Each parameter's entries have their place before any is evaluated: the threads fill
        // them in any order, the result is in layout order.
        std::vector<uint32_t> slot(m_params.size(), UINT32_MAX);
        uint32_t count = 0;
        for (size_t i = 0; i < m_params.size(); ++i)
            if (!(m_params[i].param.name.ends_with("._extra_state") && enabled("extra_state")))
                slot[i] = count++; // extra_state: dropped on save and load alike
        r.entries.resize(count);
        if (!forEachIndex(
                m_params.size(), threads,
                [&](size_t i) {
                    if (slot[i] != UINT32_MAX)
                        r.entries[slot[i]] = evaluate(m_params[i], {});
                },
                [&](size_t done) { return !progress || progress(done, total); }))
            return std::nullopt;
        for (const DiffEntry &e : r.entries) {
            ++r.expectedModel;
            r.loadableModel += e.realLoadFills;
        }
        // Transformer Engine's extra state: asked for as entries of their own, not counted as
        // parameters (fsdp_dtensor drops them on save and load alike).
        if ((m_layout.transformerEngine || m_layout.linearExtraState) &&
            !(m_fsdpDtensorLoad && enabled("extra_state")))
            for (const std::string &module : teModules())
                r.entries.push_back(evaluateExtraState(module));
        const bool hasOptimizer = m_disk.optNameFirst.size() + m_disk.optStateFirst.size() > 0;
        if (m_options.includeOptimizer && hasOptimizer) {
            std::vector<std::string> states = m_layout.optimizerStates;
            if (m_layout.optimizerStep && !m_torchDist) // torch_dist keeps step in param_groups
                states.push_back("step");
            // torch_dist's distributed optimizer also stores the fp32 main parameters.
            if (!m_disk.mainParamState.empty() &&
                std::find(states.begin(), states.end(), m_disk.mainParamState) == states.end())
                states.push_back(m_disk.mainParamState);
            const size_t base = r.entries.size();
            count = 0;
            for (size_t i = 0; i < m_params.size(); ++i) {
                const LayoutParam &p = m_params[i].param;
                slot[i] = p.hasOptimizerState && !p.name.ends_with("._extra_state") ? count++
                                                                                    : UINT32_MAX;
            }
            // paramGroups() adds one entry per parameter: room for them now, not a reallocation
            // moving every entry.
            r.entries.reserve(base + size_t(count) * (states.size() + 1));
            r.entries.resize(base + size_t(count) * states.size());
            if (!forEachIndex(
                    m_params.size(), threads,
                    [&](size_t i) {
                        if (slot[i] == UINT32_MAX)
                            return;
                        for (size_t s = 0; s < states.size(); ++s)
                            r.entries[base + slot[i] * states.size() + s] =
                                evaluate(m_params[i], states[s]);
                    },
                    [&](size_t done) {
                        return !progress || progress(m_params.size() + done, total);
                    }))
                return std::nullopt;
            for (size_t e = base; e < r.entries.size(); ++e) {
                ++r.expectedOptimizer;
                r.loadableOptimizer += r.entries[e].realLoadFills;
            }
        }
        if (m_options.includeOptimizer && !m_disk.groupMeta.empty())
            paramGroups(r, threads);
        for (const DiskKey &k : m_disk.keys) {
            if (k.used)
                continue;
            std::string legacyNote;
            if (m_legacy && !legacyUnconsumed(k.key, legacyNote))
                continue;
            const bool inModel =
                m_disk.findModel(k.key.substr(modelWrapperLength(k.key))) != nullptr;
            const bool training =
                m_disk.megatronWrapped ? modelWrapperLength(k.key) == 0 : !k.tensor;
            if (!inModel && training && !k.key.starts_with("optimizer.state."))
                continue; // args, iteration, rng state, param_groups: the training loop's
            if (k.key.starts_with("optimizer.state.") && !m_options.includeOptimizer)
                continue;
            UnconsumedKey u;
            u.key = std::string(k.key);
            u.entry = entryOf(&k);
            u.tensor = k.tensor != nullptr;
            if (k.tensor) {
                u.shape = k.tensor->shape;
                u.dtype = k.tensor->dtypeName;
            }
            u.note = legacyNote.empty() ? stageLocalNote(k.key) : legacyNote;
            if (u.note.empty() && k.tensor)
                u.note = shapeNote(k.key, *k.tensor);
            if (u.note.empty() && k.tensor)
                u.note = detail::recomputedBufferNote(k.key);
            if (u.note.empty() && k.tensor)
                u.note = untiedOutputNote(k.key);
            if (u.note.empty())
                u.note = !k.key.starts_with("optimizer.state.")
                             ? (stateDictLoad() ? "no expected parameter consumes it; a strict "
                                                  "load_state_dict raises Unexpected key(s) on "
                                                  "it, a non-strict one returns it"
                                                : "no expected parameter consumes it; a DCP load "
                                                  "ignores it silently")
                         : optimizerStateOfKnownParam(k.key)
                             ? "an optimizer state the layout does not list (layout "
                               "optimizer.states)"
                             : "optimizer state of a parameter the model does not have";
            r.unconsumed.push_back(std::move(u));
        }
        detail::LoadContext context{{}, stackedRequest(), m_fsdpDtensorLoad, {}};
        context.raisesFirst = globalShapeMismatch(r);
        std::vector<std::string> &unrequested = context.unrequested;
        std::vector<uint32_t> stored = m_disk.modelKeys;
        // Extra states stored as objects (legacy files; torch_dist ShardedObjects).
        for (const auto &[name, i] : m_extraStateKeys)
            if (!m_disk.keys[i].tensor && m_disk.keys[i].key == name)
                stored.push_back(i);
        for (uint32_t i : stored) {
            const DiskKey &k = m_disk.keys[i];
            if (k.requested)
                continue;
            if (!m_legacy) {
                unrequested.emplace_back(k.key);
                continue;
            }
            // A rank's load_state_dict sees its own file's `model` entry: the files the
            // requests read, names without the file.
            const size_t slash = k.key.find('/');
            if (slash != std::string_view::npos &&
                m_legacyDirsRead.count(std::string(k.key.substr(0, slash))) &&
                k.key.substr(slash).starts_with("/model."))
                unrequested.emplace_back(k.key.substr(slash + 7));
        }
        r.outcome = detail::loadOutcome(r, m_index, m_options, context);
        if (m_legacy && !m_legacyMissingFiles.empty()) {
            // torch.load of a rank's file that is not there raises before anything loads.
            r.outcome = LoadOutcome{};
            r.outcome.action = LoadOutcome::Action::Raises;
            r.outcome.message = "FileNotFoundError: [Errno 2] No such file or directory: '" +
                                m_index.dataDir + "/" + m_legacyMissingFiles.front() +
                                "/model_optim_rng.pt' (the model's parallel sizes ask for " +
                                std::to_string(m_legacyMissingFiles.size()) +
                                " rank files the checkpoint does not have)";
            r.outcome.namedKeys = m_legacyMissingFiles;
        }
        summariseCasts(r);
        if (progress)
            progress(2 * m_params.size(), 2 * m_params.size());
        return r;
    }

    // Megatron-FSDP keeps each parameter's optimizer group (lr, weight decay, …) as
    // optimizer.param_to_group_meta.<live name>.* items: one entry per parameter says whether its
    // group is there. Names are the live ones (the split handlers rename only optimizer.state).
    void paramGroups(DiffResult &r, unsigned threads)
    {
        // The hyperparameter the request names first: DCP flattens each group dict in its own
        // order, which the saving run's groups show.
        std::string firstLeaf;
        if (!m_disk.groupMeta.empty()) {
            const std::string_view k = m_disk.keys[m_disk.groupMeta.begin()->second].key;
            firstLeaf = "." + std::string(k.substr(k.rfind('.') + 1));
        }
        std::vector<uint32_t> slot(m_params.size(), UINT32_MAX);
        uint32_t count = 0;
        for (size_t i = 0; i < m_params.size(); ++i) {
            const LayoutParam &p = m_params[i].param;
            if (p.hasOptimizerState && !p.name.ends_with("._extra_state"))
                slot[i] = count++;
        }
        const size_t base = r.entries.size();
        r.entries.resize(base + count);
        forEachIndex(m_params.size(), threads,
                     [&](size_t i) {
                         if (slot[i] != UINT32_MAX)
                             r.entries[base + slot[i]] = groupEntry(m_params[i].param, firstLeaf);
                     },
                     {});
        for (DiskKey &k : m_disk.keys)
            if (k.key.starts_with("optimizer.param_to_group_meta."))
                k.used = true;
    }

    // One parameter's param_group entry (reads the index and the layout only: any thread).
    DiffEntry groupEntry(const LayoutParam &p, const std::string &firstLeaf) const
    {
        DiffEntry e;
        e.section = Section::Other;
        e.param = p.name;
        e.state = "param_group";
        e.name = p.name + ".param_group";
        e.requestKeys = {"optimizer.param_to_group_meta.module.module.module." + p.name +
                         firstLeaf};
        auto it = m_disk.groupMeta.find(p.name);
        if (it == m_disk.groupMeta.end())
            it = m_disk.groupMeta.find(
                replaceAll(p.name, "." + m_layout.mtpInner + ".", ".transformer_layer."));
        if (it != m_disk.groupMeta.end()) {
            e.sources.push_back(
                {std::string(m_disk.keys[it->second].key), {}, {}, 0, 0, 0, 0, {}, it->second});
        } else {
            e.status = LoadStatus::Unloadable;
            e.realLoadFills = false;
            e.reason = "no optimizer.param_to_group_meta entries for it, while the checkpoint "
                       "has them for other parameters";
            e.fix = "Re-save with the optimizer groups of every parameter (the model has a "
                    "parameter the saving run's optimizer did not).";
            // Saved by a model that held the sections apart: the split handlers rename
            // optimizer.state to on-disk names, never param_to_group_meta.
            std::vector<std::string> parts;
            if (p.fusion)
                for (const FusedSection &sec : p.fusion->sections)
                    if (m_disk.groupMeta.count(sec.name))
                        parts.push_back(sec.name);
            if (!p.absorbs.empty() && m_disk.groupMeta.count(p.absorbs))
                parts.push_back(p.absorbs);
            if (!parts.empty()) {
                std::string list;
                for (const std::string &n : parts)
                    list += (list.empty() ? "" : ", ") + n;
                e.reason = "the checkpoint keeps optimizer groups for " + list +
                           " (saved by a model that held them apart): Megatron's handlers "
                           "rename optimizer.state to the on-disk names but leave "
                           "param_to_group_meta under the live names, so this request has "
                           "no entry";
                e.fix = "Load with --no-strict-fsdp-dtensor-load (allow_partial_load: this "
                        "run's group, lr and weight decay, stands for it), or rename the "
                        "checkpoint's param_to_group_meta entries of " +
                        list + " to " + p.name + ".";
            }
        }
        return e;
    }

    // Whether an optimizer key names a parameter of the layout (stacked names included).
    bool optimizerStateOfKnownParam(std::string_view key)
    {
        std::string_view rest = key.substr(16);
        const size_t first = rest.find('.');
        if (first != std::string_view::npos &&
            kKnownStates.count(std::string(rest.substr(0, first))))
            rest = rest.substr(first + 1);
        else if (const size_t last = rest.rfind('.'); last != std::string_view::npos)
            rest = rest.substr(0, last);
        while (rest.starts_with("module."))
            rest = rest.substr(7);
        if (m_byName.count(std::string(rest)))
            return true;
        if (m_stackedNames.empty()) { // stacked: any layer of that name (built once)
            static const std::regex layer(R"(\.layers\.\d+\.)");
            for (const Expanded &x : m_params)
                m_stackedNames.insert(std::regex_replace(x.param.name, layer, ".layers."));
        }
        return m_stackedNames.count(std::string(rest)) > 0;
    }

    bool enabled(std::string_view rule) const
    {
        return std::find(m_options.disabledRules.begin(), m_options.disabledRules.end(), rule) ==
               m_options.disabledRules.end();
    }
    // Whether the load asks for the layers stacked (decoder.layers.<name> with a layer axis), as
    // Megatron does for a checkpoint saved so; a loader without the rule asks layer by layer.
    bool stackedRequest() const { return m_stackedLayers && enabled("torch_dist_stacked"); }

    // torch_dist asks for a stacked key with the model's layer count as its global shape; a
    // checkpoint stacked over another count fails megatron-core's check of global shapes before
    // any strictness applies. The first such key in the model's order, as megatron-core names it.
    std::string globalShapeMismatch(const DiffResult &r) const
    {
        if (!m_torchDist || !stackedRequest())
            return {};
        for (const DiffEntry &e : r.entries) {
            if (e.section != Section::Model)
                continue;
            for (const DiffSource &s : e.sources) {
                const size_t at = s.key.find("decoder.layers.");
                if (s.index.size() != 1 || s.shape.empty() || at == std::string::npos ||
                    std::isdigit(static_cast<unsigned char>(s.key[at + 15])) ||
                    s.key.find(".experts.experts.") != std::string::npos ||
                    s.shape[0] == m_decoderLayers)
                    continue;
                std::string loaded = "torch.Size([", expected = "(";
                for (size_t d = 0; d < s.shape.size(); ++d) {
                    loaded += (d ? ", " : "") + std::to_string(s.shape[d]);
                    expected += (d ? ", " : "") +
                                std::to_string(d == 0 ? int64_t(m_decoderLayers) : s.shape[d]);
                }
                loaded += "])";
                expected += s.shape.size() == 1 ? ",)" : ")";
                return "CheckpointingException: Global shape mismatch for loaded (" + loaded +
                       ") and expected (" + expected + ") tensor for key " + s.key;
            }
        }
        return {};
    }
    static bool byLoader(const std::string &rule)
    {
        for (const RuleInfo &r : allRules())
            if (r.name == rule)
                return r.appliedByLoader;
        return false;
    }

    // What the loader asks for, given which rules it has (rulemap.h).
    Request request(const LayoutParam &p, bool allRules, bool torchDistSplit = false) const
    {
        auto on = [&](const std::string &rule) {
            return allRules ||
                   (enabled(rule) && (m_megatronLoader || m_options.everyRule || !byLoader(rule)));
        };
        Request q = detail::loaderRequest(p, m_layout, m_torchDist && !torchDistSplit, on);
        // The local spec (no Transformer Engine) of a layer with linear_qkv keeps its norms
        // under TE's names in torch_dist: its sharded_state_dict_keys_map.
        if (m_torchDist && !m_layout.transformerEngine && on("local_spec_keys_map"))
            for (Piece &piece : q.pieces) {
                static const std::regex norm(
                    R"(^(.*\.layers\.\d+\.)(input_layernorm|pre_mlp_layernorm)\.(weight|bias)$)");
                std::smatch m;
                if (!std::regex_match(piece.name, m, norm) ||
                    !m_byName.count(m[1].str() + "self_attention.linear_qkv.weight"))
                    continue;
                piece.name = m[1].str() +
                             (m[2] == "input_layernorm" ? "self_attention.linear_qkv.layer_norm_"
                                                        : "mlp.linear_fc1.layer_norm_") +
                             m[3].str();
                q.rules.push_back("local_spec_keys_map");
                q.renamed = true;
            }
        return q;
    }

    DiskKey *find(const std::string &name, const std::string &state)
    {
        return state.empty() ? m_disk.findModel(name)
                             : m_disk.findOptimizer(name, state, scratch().key);
    }
    std::string requestKey(const std::string &name, const std::string &state) const
    {
        if (state.empty())
            return m_disk.modelWrapper + name;
        return m_disk.optimizerWrapper + name + "." + state;
    }

    // The keys a request asks for and, for a parameter asked for in sections, their rows.
    void setRequest(DiffEntry &e, const Request &q, const std::string &state) const
    {
        e.requestKeys.clear();
        e.requestRows.clear();
        for (const Piece &piece : q.pieces)
            e.requestKeys.push_back(requestKey(piece.name, state));
        if (q.pieces.size() > 1)
            for (const Piece &piece : q.pieces)
                e.requestRows.push_back({requestKey(piece.name, state),
                                         piece.shape,
                                         {},
                                         piece.dim,
                                         piece.begin,
                                         piece.end,
                                         0,
                                         {},
                                         -1});
    }

    // Looks every piece up; fills sources. False if any is missing.
    bool lookup(const Request &q, const std::string &state, std::vector<DiskKey *> &found)
    {
        found.clear();
        scratch().lead.clear();
        for (const Piece &piece : q.pieces) {
            std::vector<int64_t> lead;
            DiskKey *k = find(piece.name, state);
            if ((!k || !k->tensor) && m_mayBeStacked && enabled("torch_dist_stacked"))
                k = findStacked(piece.name, state, lead);
            if (!k || !k->tensor)
                return false;
            found.push_back(k);
            scratch().lead.push_back(std::move(lead));
        }
        return true;
    }

    // torch_dist stacks layers ([L, …] under `decoder.layers.x`) and experts ([E, …] under
    // `mlp.experts.experts.linear_fcN.weight`, per layer when the block is not homogeneous); a
    // parameter is one index of those axes.
    DiskKey *findStacked(const std::string &name, const std::string &state,
                         std::vector<int64_t> &lead)
    {
        static const std::regex layer(R"(\.layers\.(\d+)\.)");
        static const std::regex expert(R"(\.mlp\.experts\.linear_fc([12])\.(weight|bias)(\d+)$)");
        std::smatch m;
        std::optional<std::pair<int64_t, std::string>> byLayer, byExpert; // index, stacked name
        if (std::regex_search(name, m, layer))
            byLayer = {std::stoll(m[1].str()), m.prefix().str() + ".layers." + m.suffix().str()};
        // SequentialMLP's local_experts.<e>.linear_fcN stack under the same key as the grouped
        // form: megatron-core's sharded state dicts make the two interchangeable.
        static const std::regex sequential(
            R"(\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.(weight|bias)$)");
        auto expertStack =
            [&](const std::string &n) -> std::optional<std::pair<int64_t, std::string>> {
            std::smatch e;
            if (std::regex_search(n, e, expert))
                return std::pair{std::stoll(e[3].str()), e.prefix().str() +
                                                             ".mlp.experts.experts.linear_fc" +
                                                             e[1].str() + "." + e[2].str()};
            if (std::regex_search(n, e, sequential))
                return std::pair{std::stoll(e[1].str()), e.prefix().str() +
                                                             ".mlp.experts.experts.linear_fc" +
                                                             e[2].str() + "." + e[3].str()};
            return std::nullopt;
        };
        byExpert = expertStack(name);
        std::vector<std::pair<std::vector<int64_t>, std::string>> tries;
        if (byLayer) {
            if (auto both = expertStack(byLayer->second))
                tries.push_back({{byLayer->first, both->first}, both->second});
            tries.push_back({{byLayer->first}, byLayer->second});
        }
        if (byExpert)
            tries.push_back({{byExpert->first}, byExpert->second});
        for (auto &[indices, stacked] : tries) {
            DiskKey *k = find(stacked, state);
            if (!k || !k->tensor || k->tensor->shape.size() < indices.size())
                continue;
            bool inside = true;
            for (size_t i = 0; i < indices.size(); ++i)
                inside = inside && indices[i] < k->tensor->shape[i];
            if (!inside)
                continue;
            lead = indices;
            return k;
        }
        lead.clear();
        return nullptr;
    }

    void fillSources(DiffEntry &e, const Request &q, const std::vector<DiskKey *> &found)
    {
        for (size_t i = 0; i < found.size(); ++i) {
            DiskKey *k = found[i];
            mark(k->used);
            DiffSource src{std::string(k->key),
                           k->tensor->shape,
                           k->tensor->dtypeName,
                           q.pieces[i].dim,
                           q.pieces[i].begin,
                           q.pieces[i].end,
                           0,
                           {},
                           entryOf(k)};
            if (i < scratch().lead.size())
                src.index = scratch().lead[i];
            e.sources.push_back(std::move(src));
        }
        if (std::any_of(scratch().lead.begin(), scratch().lead.end(),
                        [](const auto &l) { return !l.empty(); }) &&
            std::find(e.rules.begin(), e.rules.end(), "torch_dist_stacked") == e.rules.end())
            e.rules.push_back("torch_dist_stacked");
    }

    // Shape, dtype and coverage of found pieces → status.
    void judge(DiffEntry &e, const Request &q, const std::vector<DiskKey *> &found,
               const std::string &state, LoadStatus mapped)
    {
        e.status = mapped;
        for (size_t i = 0; i < found.size(); ++i) {
            const TensorEntry &t = *found[i]->tensor;
            const bool step = state == "step";
            const size_t lead = i < scratch().lead.size() ? scratch().lead[i].size() : 0;
            const std::vector<int64_t> stored(t.shape.begin() + std::ptrdiff_t(lead),
                                              t.shape.end());
            if (!step && stored != q.pieces[i].shape) {
                e.status = LoadStatus::ShapeMismatch;
                e.realLoadFills = false;
                e.reason = "stored as " + std::string(found[i]->key) + " " + shapeText(t.shape) +
                           ", the model expects " + shapeText(q.pieces[i].shape) +
                           "; the load raises on the size mismatch, whatever its strictness";
                e.fix = detail::shapeMismatchFix(q.pieces[i].name, stored, q.pieces[i].shape,
                                                 m_tpDim, m_tpLocalSize);
                return;
            }
            const Problem *problem = found[i]->problem;
            if (problem && problem->effect == Problem::Effect::Unreadable) {
                e.status = LoadStatus::Unreadable;
                e.realLoadFills = false;
                // Per file, not per item, so that a report folds a file's keys into one group
                // (inspect lists each item's offsets).
                const auto slash = problem->file.find_last_of('/');
                e.reason = std::string(found[i]->key) + ": its data in " +
                           problem->file.substr(slash == std::string::npos ? 0 : slash + 1) +
                           " cannot be read (`shardscope-cli inspect` names each broken item); "
                           "the load raises reading it, whatever the strictness";
                e.fix = "Restore the checkpoint's data files (a save cut short, or a copy that "
                        "stopped early; shardscope-cli inspect lists every broken item) or load "
                        "an earlier checkpoint.";
                return;
            }
            if (problem && problem->effect == Problem::Effect::Holes) {
                e.status = LoadStatus::Partial;
                e.realLoadFills = false;
                e.reason = std::string(found[i]->key) + ": " + problem->message +
                           "; a load finishes without a word and leaves the uncovered part at "
                           "its initial values";
                e.fix = "The metadata's chunks do not cover the tensor (ranks that disagreed on "
                        "the sharding, or an edited .metadata; shardscope-cli inspect lists the "
                        "tensor's chunks): re-save the checkpoint or load an earlier one.";
                return;
            }
            if (!step && !e.dtype.empty() && t.dtypeName != e.dtype &&
                e.status != LoadStatus::ShapeMismatch) {
                e.status = LoadStatus::Cast;
                e.reason = "stored as " + t.dtypeName + ", loaded into " + e.dtype +
                           " (DCP copies with a cast)";
                e.narrowing =
                    e.narrowing || narrowingCast(t.dtype, dtypeFromName(e.dtype).value_or(t.dtype));
            }
        }
    }

    // Under stage-local names (m_stageEnds set): the first layer of the stage that holds
    // decoder layer `layer`, which that stage calls layer 0.
    // What a stored tensor nobody asks for is, when its name or shape says: a layer past the
    // model's depth, or all experts stacked where the model asks for one key per expert
    // (Megatron-LM#5844; NVIDIA-NeMo/Automodel#2595's grouped 3-D experts). Empty otherwise.
    std::string shapeNote(std::string_view key, const TensorEntry &t) const
    {
        std::string_view rest = key.substr(modelWrapperLength(key));
        if (key.starts_with("optimizer."))
            return {};
        const int layer = decoderLayerOf(std::string(rest));
        if (layer >= 0 && m_decoderLayers > 0 && layer >= m_decoderLayers)
            return "layer " + std::to_string(layer) + " is past the model's " +
                   std::to_string(m_decoderLayers) +
                   " decoder layers: a deeper model saved it (--num-layers differs), and a "
                   "load ignores it";
        const int experts = m_layout.numExperts;
        if (experts > 1 && t.shape.size() >= 2 && t.shape[0] == experts) {
            // The per-expert keys the model asks for in its place, if any.
            std::string stem(rest);
            if (const size_t dot = stem.rfind('.'); dot != std::string::npos)
                stem = stem.substr(0, dot);
            std::string asked;
            for (const Expanded &x : m_params)
                if (x.param.expert >= 0 && decoderLayerOf(x.param.name) == layer &&
                    x.param.name.starts_with(stem + ".weight")) {
                    asked = x.param.name;
                    break;
                }
            return "its leading axis is the expert count (" + std::to_string(experts) +
                   "): all experts stacked in one tensor" +
                   (asked.empty() ? std::string()
                                  : ", where the model asks for one key per expert (" + asked +
                                        ", …); a load that does not unstack it leaves those "
                                        "experts unloaded");
        }
        return {};
    }

    // Why no stage reads a stored decoder layer under stage-local names; empty otherwise.
    std::string stageLocalNote(std::string_view key) const
    {
        if (m_stageEnds.empty())
            return {};
        std::string_view rest = key;
        if (rest.starts_with("optimizer.state."))
            rest = rest.substr(16);
        while (rest.starts_with("module."))
            rest = rest.substr(7);
        rest = rest.substr(modelWrapperLength(rest));
        const int layer = decoderLayerOf(std::string(rest));
        if (layer < m_maxStageLayers)
            return {};
        return "layer " + std::to_string(layer) + ": with stage-local names (Megatron-FSDP, pp " +
               std::to_string(m_stageEnds.size()) + ") every stage asks for decoder.layers.0-" +
               std::to_string(m_maxStageLayers - 1) + ", so no stage reads it";
    }

    // The stage that holds decoder layer `layer` (m_stageEnds set, layer >= 0).
    size_t stageOf(int layer) const
    {
        return size_t(std::upper_bound(m_stageEnds.begin(), m_stageEnds.end(), layer) -
                      m_stageEnds.begin());
    }

    int stageOffset(int layer) const
    {
        if (m_stageEnds.empty() || layer < 0)
            return 0;
        const size_t stage = stageOf(layer);
        return stage == 0 ? 0 : m_stageEnds[stage - 1];
    }

    DiffEntry evaluate(const Expanded &x, const std::string &state)
    {
        const LayoutParam &p = x.param;
        if (m_legacy)
            return evaluateLegacy(x, state);
        const int layer = decoderLayerOf(p.name);
        if (const int offset = stageOffset(layer); offset > 0)
            return evaluateStageLocal(x, state, layer, offset);
        return evaluateNamed(x, state);
    }

    // What the load finds for the names as given (no stage-local renaming left to do).
    DiffEntry evaluateNamed(const Expanded &x, const std::string &state)
    {
        const LayoutParam &p = x.param;
        // Without handle_experts_in_state_dict every EP rank asks for its local names.
        if (!x.localName.empty() && !enabled("experts_global")) {
            LayoutParam localParam = p;
            localParam.name = x.localName;
            localParam.expert = m_layout.numExperts / m_layout.parallel.ep > 0
                                    ? p.expert % (m_layout.numExperts / m_layout.parallel.ep)
                                    : p.expert;
            if (localParam.fusion)
                for (FusedSection &sec : localParam.fusion->sections)
                    sec.name = withExpert(sec.name, localParam.expert);
            DiffEntry e = evaluateNamed(Expanded{localParam, {}, x.epRank}, state);
            e.param = p.name;
            e.name = state.empty() ? p.name : p.name + "." + state;
            if (x.epRank > 0 && !e.sources.empty()) {
                e.status = LoadStatus::WrongSource;
                e.realLoadFills = false;
                e.wrongSource = true;
                e.reason = "without expert globalisation EP rank " + std::to_string(x.epRank) +
                           " asks for " + e.sources.front().key + ", which holds expert " +
                           std::to_string(localParam.expert) + " (EP rank 0's), not expert " +
                           std::to_string(p.expert) + ": it loads the wrong weights silently";
                e.fix = "Load with a Megatron-LM whose fsdp_dtensor load runs "
                        "handle_experts_in_state_dict (--num-experts set).";
            }
            return e;
        }
        return evaluateParam(p, state);
    }

    // The modules with an `_extra_state`, by live name, in the order their parameters come: the
    // linears (TE's, and Megatron's own, which keep one for compatibility) and, with Transformer
    // Engine, every attention's core_attention (TEDotProductAttention). Experts are left out:
    // their extra states carry an expert axis in torch_dist (TE's grouped linears split them
    // per GEMM), which we do not model.
    std::vector<std::string> teModules() const
    {
        static const std::regex te(
            R"(^(.*\.(self_attention|mlp|mlp\.shared_experts)\.(linear_qkv|linear_proj|linear_fc1|)"
            R"(linear_fc2|linear_q_proj|linear_q_down_proj|linear_q_up_proj|linear_kv_down_proj|)"
            R"(linear_kv_up_proj|linear_qkv_down_proj))\.[a-z_]+$)");
        std::vector<std::string> out;
        std::unordered_set<std::string> seen;
        std::smatch m;
        for (const Expanded &x : m_params) {
            if (!std::regex_match(x.param.name, m, te))
                continue;
            const std::string module = m[1].str();
            const size_t at = module.rfind(".self_attention.");
            // TEDotProductAttention has one; the local spec's DotProductAttention has none.
            if (at != std::string::npos && m_layout.transformerEngine) {
                const std::string core = module.substr(0, at) + ".self_attention.core_attention";
                if (seen.insert(core).second)
                    out.push_back(core);
            }
            if (seen.insert(module).second)
                out.push_back(module);
        }
        return out;
    }

    // What the load asks for a TE module's `_extra_state`: a state dict key (legacy torch,
    // torch.save, DCP) or, in torch_dist, a ShardedObject `<key>/shard_<layer>_<layers>` of the
    // stacked layers (`shard_0_1` per layer when the block is not homogeneous).
    DiffEntry evaluateExtraState(const std::string &module)
    {
        DiffEntry e;
        e.param = e.name = module + "._extra_state";
        e.rules = {"extra_state"};
        std::vector<std::string> keys;
        const int layer = decoderLayerOf(module);
        if (m_torchDist) {
            const std::string rest =
                m_layout.mtpInner != "transformer_layer"
                    ? replaceAll(e.name, "." + m_layout.mtpInner + ".", ".transformer_layer.")
                    : e.name;
            if (stackedRequest() && layer >= 0) {
                const std::string from = "decoder.layers." + std::to_string(layer) + ".";
                const std::string key = "decoder.layers." + rest.substr(from.size());
                const std::string at = "/shard_" + std::to_string(layer);
                keys = {key + at + "_" + std::to_string(m_decoderLayers), key + at};
            } else {
                keys = {rest + "/shard_0_1", rest + "/shard_0"};
            }
        } else if (m_legacy) {
            const auto [stage, local] = legacyStageLocal(e.name);
            const std::string dir = legacyDir(0, stage, 0);
            m_legacyDirsRead.insert(dir);
            keys = {dir + "/model." + local};
        } else {
            keys = {m_disk.modelWrapper + e.name, e.name};
        }
        e.requestKeys = {keys.front()};
        for (const std::string &k : keys)
            if (auto it = m_extraStateKeys.find(k); it != m_extraStateKeys.end()) {
                DiskKey &d = m_disk.keys[it->second];
                d.used = d.requested = true;
                // Stacked: the object's offset along the layer axis is the layer.
                std::vector<int64_t> index;
                if (m_torchDist && stackedRequest() && layer >= 0)
                    index = {layer};
                e.sources.push_back(
                    {k, {}, "object", 0, 0, 0, 0, index, d.key == k ? int64_t(it->second) : -1});
                e.status = LoadStatus::Ok;
                e.reason = "Transformer Engine's extra state (FP8 metadata), stored as " + k;
                return e;
            }
        e.status = LoadStatus::Unloadable;
        e.realLoadFills = false;
        e.reason = "the model is built with Transformer Engine, whose " + module +
                   " asks for its extra state (FP8 scaling metadata) as " + keys.front() +
                   "; the checkpoint has none (saved by a model without Transformer Engine, "
                   "--transformer-impl local, or by a converter that drops it)";
        e.fix = m_torchDist
                    ? "Load with --dist-ckpt-strictness log_unexpected (or ignore_all): the extra "
                      "state only holds FP8 scaling factors, which can start from their "
                      "defaults; or build the model with --transformer-impl local."
                : m_legacy
                    ? "Nothing breaks: Megatron retries the strict load as non-strict and goes "
                      "on with the extra state at its defaults (it only matters for FP8 "
                      "training); --transformer-impl local builds the model without it."
                    : "Load with strict=False (the extra state only holds FP8 scaling "
                      "factors), or build the model without Transformer Engine.";
        return e;
    }

    // Megatron's legacy torch format: one torch.save per rank, mp_rank_<tp>[_<pp>][_<ep>]/
    // model_optim_rng.pt, holding that rank's module state_dict (TP-local shapes, layer names
    // local to the stage, expert indices local to the EP rank) under `model`.
    void setUpLegacy()
    {
        for (const DiskKey &k : m_disk.keys)
            if (const size_t slash = k.key.find('/'); slash != std::string_view::npos)
                m_legacyDirs.insert(std::string(k.key.substr(0, slash)));
        const ParallelConfig &par = m_layout.parallel;
        if (par.pp > 1)
            if (auto ends = decoderStageEnds(m_layout))
                m_legacyStageEnds = std::move(*ends);
        for (int t = 0; t < par.tp; ++t)
            for (int st = 0; st < std::max(1, par.pp); ++st)
                for (int e = 0; e < std::max(1, par.ep); ++e) {
                    const std::string dir = legacyDir(t, st, e);
                    if (!m_legacyDirs.count(dir))
                        m_legacyMissingFiles.push_back(dir);
                }
    }

    // A legacy rank file holds its stage's layers under stage-local numbers: the stage of a live
    // name, and the name as that stage's file spells it.
    std::pair<int, std::string> legacyStageLocal(const std::string &name) const
    {
        const int layer = decoderLayerOf(name);
        if (m_legacyStageEnds.empty() || layer < 0)
            return {0, name};
        const int stage =
            int(std::upper_bound(m_legacyStageEnds.begin(), m_legacyStageEnds.end(), layer) -
                m_legacyStageEnds.begin());
        const int offset = stage ? m_legacyStageEnds[size_t(stage) - 1] : 0;
        const std::string from = "decoder.layers." + std::to_string(layer) + ".";
        if (offset == 0 || !name.starts_with(from))
            return {stage, name};
        return {stage, "decoder.layers." + std::to_string(layer - offset) + "." +
                           name.substr(from.size())};
    }

    std::string legacyDir(int tp, int stage, int ep) const
    {
        char buf[64];
        int n = std::snprintf(buf, sizeof buf, "mp_rank_%02d", tp);
        if (m_layout.parallel.pp > 1)
            n += std::snprintf(buf + n, sizeof buf - size_t(n), "_%03d", stage);
        if (m_layout.parallel.ep > 1)
            std::snprintf(buf + n, sizeof buf - size_t(n), "_%03d", ep);
        return buf;
    }

    // Whether an unread key of a legacy checkpoint is worth listing, with its note: only the
    // files' `model` entries, and other TP ranks' copies of what TP rank 0 was checked for
    // are read by those ranks.
    bool legacyUnconsumed(std::string_view key, std::string &note) const
    {
        const size_t slash = key.find('/');
        if (slash == std::string_view::npos || !key.substr(slash).starts_with("/model"))
            return false;
        const std::string dir(key.substr(0, slash));
        if (m_legacyDirsRead.count(dir))
            return true;
        int tp = 0;
        if (std::sscanf(dir.c_str(), "mp_rank_%d", &tp) == 1 && tp < m_layout.parallel.tp) {
            const std::string first = "mp_rank_00" + dir.substr(std::min<size_t>(10, dir.size()));
            if (m_legacyDirsRead.count(first))
                return false; // TP rank `tp` reads it; rank 0's copy stands for it
        }
        note = "in " + dir +
               "/model_optim_rng.pt, which no rank of the model's parallel "
               "configuration (tp " +
               std::to_string(m_layout.parallel.tp) + ", pp " +
               std::to_string(m_layout.parallel.pp) + ", ep " +
               std::to_string(m_layout.parallel.ep) + ") reads";
        return true;
    }

    DiffEntry evaluateLegacy(const Expanded &x, const std::string &state)
    {
        const LayoutParam &p = x.param;
        const ParallelConfig &par = m_layout.parallel;
        LayoutParam lp = p;
        lp.fusion.reset(); // no handlers: the module's own names and shapes
        lp.absorbs.clear();
        auto [stage, name] = legacyStageLocal(p.name);
        int epRank = 0;
        const bool expert = p.expert >= 0 && par.ep > 1 && m_layout.numExperts % par.ep == 0;
        if (expert) {
            const int perRank = m_layout.numExperts / par.ep;
            epRank = p.expert / perRank;
            name = withExpert(name, p.expert % perRank);
        }
        const int tp = expert ? par.etp : par.tp;
        if (p.tpDim >= 0 && size_t(p.tpDim) < lp.shape.size() && tp > 1)
            lp.shape[size_t(p.tpDim)] /= tp;
        const std::string dir = legacyDir(0, stage, epRank);
        m_legacyDirsRead.insert(dir);
        lp.name = dir + "/model." + name;
        m_tpDim = p.tpDim; // judge() names a TP-size change from the shards' ratio
        m_tpLocalSize = tp;
        DiffEntry e = evaluateParam(lp, state);
        m_tpDim = -1;
        m_tpLocalSize = 1;
        e.param = p.name;
        e.name = state.empty() ? p.name : p.name + "." + state;
        if (!m_legacyDirs.count(dir)) {
            e.reason = "the checkpoint has no " + dir +
                       "/model_optim_rng.pt, the file this rank loads (saved with other "
                       "parallel sizes?)";
            e.fix = "Load with the tensor, pipeline and expert parallel sizes the checkpoint "
                    "was saved with (legacy torch checkpoints cannot be resharded on load), or "
                    "convert it with Megatron's tools/checkpoint/convert.py.";
        } else if (e.status == LoadStatus::ShapeMismatch) {
            e.reason += " (TP-local: tp " + std::to_string(tp) + ")";
        }
        return e;
    }

    // A decoder layer past the first stage, asked for by its stage-local name: what that key
    // holds is another layer's data, or nothing.
    DiffEntry evaluateStageLocal(const Expanded &x, const std::string &state, int layer, int offset)
    {
        const std::string from = "decoder.layers." + std::to_string(layer) + ".";
        const std::string to = "decoder.layers." + std::to_string(layer - offset) + ".";
        auto local = [&](const std::string &n) {
            return n.starts_with(from) ? to + n.substr(from.size()) : n;
        };
        Expanded lx = x;
        lx.param.name = local(x.param.name);
        lx.param.absorbs = local(x.param.absorbs);
        if (lx.param.fusion)
            for (FusedSection &sec : lx.param.fusion->sections)
                sec.name = local(sec.name);
        if (!lx.localName.empty())
            lx.localName = local(lx.localName);
        DiffEntry e = evaluateNamed(lx, state);
        const LayoutParam &p = x.param;
        e.param = p.name;
        e.name = state.empty() ? p.name : p.name + "." + state;
        const size_t stage = stageOf(layer);
        const std::string asked = e.requestKeys.empty() ? to : e.requestKeys.front();
        const std::string why = "pp " + std::to_string(m_stageEnds.size()) + ": stage " +
                                std::to_string(stage) + " holds layers " + std::to_string(offset) +
                                "-" + std::to_string(m_stageEnds[stage] - 1) +
                                " and Megatron-FSDP names them from 0 (stage-local), so layer " +
                                std::to_string(layer) + " asks for " + asked;
        e.fix = "Resume with the pipeline-parallel size the checkpoint was saved with, or "
                "convert it to torch_dist (global layer numbers) and load that; renaming keys "
                "cannot serve two pipeline sizes at once.";
        if (e.realLoadFills || e.wrongSource) {
            e.status = LoadStatus::WrongSource;
            e.realLoadFills = false;
            e.wrongSource = true;
            e.reason = why + ", which holds layer " + std::to_string(layer - offset) +
                       "'s data: it loads the wrong weights silently";
        } else if (e.status == LoadStatus::Unloadable) {
            e.reason = why + ", which the checkpoint does not hold";
        }
        return e;
    }

    DiffEntry evaluateParam(const LayoutParam &p, const std::string &state)
    {
        DiffEntry e;
        e.section = state.empty() ? Section::Model : Section::Optimizer;
        e.param = p.name;
        e.state = state;
        e.name = state.empty() ? p.name : p.name + "." + state;
        e.shape = state == "step" ? std::vector<int64_t>{} : p.shape;
        // Optimizer states have the optimizer's dtype (fp32, or bf16 when precision-aware).
        e.dtype = state.empty() ? p.dtype : std::string();

        // Each optimizer state asks for the same request: build it once per parameter.
        if (!scratch().cached.holds(p)) {
            scratch().cached.request = request(p, false);
            scratch().cached.name = p.name;
            scratch().cached.shape = p.shape;
            scratch().cached.absorbs = p.absorbs;
            scratch().cached.fusion = p.fusion;
            scratch().cached.valid = true;
        }
        const Request *qp = &scratch().cached.request;
        setRequest(e, *qp, state);
        std::vector<DiskKey *> found;

        // 1. What the real load asks for. torch_dist asks for SwiGLU's [W; V] in one key, or for
        // `_w` / `_v` keys when the checkpoint was saved with singleton_local_shards.
        bool hit = lookup(*qp, state, found);
        Request w;
        if (!hit && m_torchDist && p.fusion && p.fusion->rule == "swiglu" && enabled("swiglu")) {
            w = request(p, false, true);
            if (lookup(w, state, found)) {
                hit = true;
                qp = &w;
                setRequest(e, *qp, state);
            }
        }
        const Request &q = *qp;
        if (hit) {
            e.rules = q.rules;
            fillSources(e, q, found);
            for (DiskKey *k : found)
                mark(k->requested);
            const bool stacked = std::any_of(scratch().lead.begin(), scratch().lead.end(),
                                             [](const auto &l) { return !l.empty(); });
            e.realLoadFills = std::all_of(e.rules.begin(), e.rules.end(), byLoader);
            judge(e, q, found, state,
                  q.split                ? LoadStatus::Split
                  : q.renamed || stacked ? LoadStatus::Rename
                                         : LoadStatus::Ok);
            if (e.reason.empty() && q.split)
                e.reason = "split by " + q.rules.front() + " into " +
                           std::to_string(q.pieces.size()) + " stored tensors";
            else if (e.reason.empty() && (q.renamed || stacked))
                e.reason =
                    "stored as " + std::string(found.front()->key) +
                    (stacked ? " at index " + std::to_string(scratch().lead.front().front()) +
                                   " of its stacked axis"
                             : std::string()) +
                    " (rule " + e.rules.back() + ")";
            return e;
        }
        e.realLoadFills = false;

        // 2. The loader lacks a handler that would have found it.
        const Request ideal = request(p, true);
        if (lookup(ideal, state, found)) {
            std::vector<std::string> off;
            for (const std::string &r : ideal.rules)
                if (!enabled(r) || (!m_megatronLoader && byLoader(r)))
                    off.push_back(r);
            for (DiskKey *k : found) {
                mark(k->used); // explained here, not unconsumed
                e.unreadKeys.emplace_back(k->key);
                e.unreadEntries.push_back(entryOf(k));
            }
            e.status = LoadStatus::Unloadable;
            if (!m_megatronLoader) {
                e.reason = "the checkpoint stores it as " + std::string(found.front()->key) +
                           (found.size() > 1 ? " (+" + std::to_string(found.size() - 1) + " more)"
                                             : std::string()) +
                           ", which rule " + (off.empty() ? "?" : off.front()) + " maps; a " +
                           std::string(formatName(m_index.format)) +
                           " load has no such handler and asks for " + e.requestKeys.front();
                e.fix = "Convert the checkpoint to the model's names (the " +
                        (off.empty() ? std::string("?") : off.front()) +
                        " mapping), or build the model the way the checkpoint was saved.";
                return e;
            }
            e.reason = "the checkpoint stores it as " + std::string(found.front()->key) +
                       (found.size() > 1 ? " (+" + std::to_string(found.size() - 1) + " more)"
                                         : std::string()) +
                       ", which only rule " + (off.empty() ? "?" : off.front()) +
                       " maps; with the rule disabled the load asks for " + e.requestKeys.front() +
                       ", which is not there";
            e.fix = "Load with a Megatron-LM whose fsdp_dtensor load runs " +
                    handlerOf(off.empty() ? std::string() : off.front()) + ".";
            for (DiskKey *k : found)
                mark(k->used); // explained here, not unconsumed
            return e;
        }

        // 3. Mappings only ShardScope makes: the data is there, the loader will not find it.
        if (enabled("mtp_spelling") && mtpSpelling(e, q, state))
            return e;
        if (enabled("experts_form") && expertsForm(e, q, state))
            return e;
        if (enabled("fused_on_disk") && fusedOnDisk(e, p, q, state))
            return e;
        if (enabled("saved_prefix") && state.empty() && savedPrefix(e, q, state))
            return e;
        if (enabled("key_prefix") && keyPrefix(e, q, state))
            return e;
        if (enabled("tied_output") && state.empty() && tiedOutput(e, p, q, state))
            return e;
        if (state.empty() && listedButUnreadable(e, q))
            return e;

        e.status = LoadStatus::Unloadable;
        e.reason = "no " + e.requestKeys.front() +
                   (e.requestKeys.size() > 1 ? " (or its other sections)" : std::string()) +
                   " in the checkpoint";
        if (!p.absorbs.empty() && !detail::absorbedByMlaHandler(p.name) &&
            m_disk.findModel(p.absorbs)) {
            e.reason += "; the layout says it absorbs " + p.absorbs +
                        ", which the checkpoint holds, but no handler of Megatron's maps that "
                        "norm onto it (the MLA handler moves only linear_qkv_down_proj's), so "
                        "it keeps its initial values";
            e.fix = "It is a norm of its own (e.g. the query norm TE fuses into linear_q_proj "
                    "when q_lora_rank is null, NVIDIA-NeMo/Megatron-Bridge#5261): build the model "
                    "without it (layout --no-mla-query-norm), or initialise it deliberately.";
            return e;
        }
        e.fix = state.empty()
                    ? "Nothing in the checkpoint provides it: compare the model config (layers, "
                      "experts, fusion flags, MTP) with the run that saved the checkpoint."
                    : "The checkpoint has no " + state +
                          " for it: a partial load keeps the optimizer state at its initial "
                          "value; use --no-load-optim or a checkpoint saved with this parameter.";
        return e;
    }

    // The same pieces under other names, by a rule only ShardScope applies: the data is there,
    // the real load asks for other keys.
    template<typename Rename>
    bool underOtherNames(DiffEntry &e, const Request &q, const std::string &state, const char *rule,
                         Rename rename, const std::string &why, const std::string &fix)
    {
        Request alt = q;
        bool changed = false;
        for (Piece &piece : alt.pieces) {
            std::string n = rename(piece.name);
            changed = changed || n != piece.name;
            piece.name = std::move(n);
        }
        std::vector<DiskKey *> found;
        if (!changed || !lookup(alt, state, found))
            return false;
        e.rules = q.rules;
        e.rules.push_back(rule);
        fillSources(e, alt, found);
        judge(e, alt, found, state, LoadStatus::Rename);
        e.realLoadFills = false;
        if (e.status == LoadStatus::Rename) {
            e.reason = "stored as " + std::string(found.front()->key) + " (" + why +
                       "); the load asks for " + e.requestKeys.front();
            e.fix = fix;
        }
        return true;
    }

    // MTP checkpoints spelled mtp_model_layer (converter output, saves before #6271).
    bool mtpSpelling(DiffEntry &e, const Request &q, const std::string &state)
    {
        const std::string from = ".transformer_layer.", to = "." + m_layout.mtpInner + ".";
        return underOtherNames(
            e, q, state, "mtp_spelling",
            [&](const std::string &n) { return detail::mtpSpelledName(n, m_layout.mtpInner); },
            "MTP inner layer spelled '" + m_layout.mtpInner + "'",
            // The names come from the layout: quoted for the shell the user pastes this into.
            "checkpoint_inspector.py modify-state-dict IN OUT --op " +
                shellQuote("rename " + replaceAll(to, ".", "\\.") + " " + from));
    }

    // Keys saved through a wrapper module: DDP and DataParallel put `module.` before every
    // name, torch.compile `_orig_mod.`, FSDP (1) `_fsdp_wrapped_module.` and checkpoint_wrapper
    // `_checkpoint_wrapped_module.` at every module they wrap; nn.Module.load_state_dict and
    // dcp.load strip none of them.
    static std::string unwrappedName(std::string_view key)
    {
        static constexpr std::string_view kInner[] = {"_orig_mod.", "_fsdp_wrapped_module.",
                                                      "_checkpoint_wrapped_module."};
        std::string s(key);
        for (std::string_view w : kInner)
            for (size_t at = s.find(w); at != std::string::npos; at = s.find(w, at))
                if (at == 0 || s[at - 1] == '.')
                    s.erase(at, w.size());
                else
                    ++at;
        while (s.starts_with("module."))
            s.erase(0, 7);
        return s;
    }

    bool savedPrefix(DiffEntry &e, const Request &q, const std::string &state)
    {
        std::call_once(m_unwrappedOnce, [&] {
            for (uint32_t i : m_disk.modelKeys) {
                std::string_view name = m_disk.keys[i].key;
                if (name.starts_with(m_disk.modelWrapper))
                    name.remove_prefix(m_disk.modelWrapper.size());
                if (std::string u = unwrappedName(name); u != name)
                    m_unwrapped.emplace(std::move(u), std::string(name));
            }
        });
        if (m_unwrapped.empty())
            return false;
        const bool found = underOtherNames(
            e, q, state, "saved_prefix",
            [&](const std::string &n) {
                auto it = m_unwrapped.find(n);
                return it == m_unwrapped.end() ? n : it->second;
            },
            "", "");
        if (found && e.status == LoadStatus::Rename && !e.sources.empty()) {
            // Which wrappers, as the user knows them.
            const std::string &stored = e.sources.front().key;
            std::vector<std::string> by;
            if (stored.starts_with("module.") ||
                stored.starts_with(m_disk.modelWrapper + "module."))
                by.push_back("DDP / DataParallel (module.)");
            for (const auto &[w, who] : {std::pair{"_orig_mod.", "torch.compile"},
                                         {"_fsdp_wrapped_module.", "FSDP"},
                                         {"_checkpoint_wrapped_module.", "checkpoint_wrapper"}})
                if (stored.find(w) != std::string::npos)
                    by.push_back(std::string(who) + " (" + w + ")");
            std::string list;
            for (size_t i = 0; i < by.size(); ++i)
                list += (i == 0 ? "" : i + 1 == by.size() ? " and " : ", ") + by[i];
            e.reason = "stored as " + stored + ": saved through " + list +
                       ", whose names the load does not strip; it asks for " +
                       e.requestKeys.front();
            const std::string &want = e.requestKeys.front();
            const std::string prefix = stored.size() > want.size() && stored.ends_with(want)
                                           ? stored.substr(0, stored.size() - want.size())
                                           : std::string();
            e.fix = "Strip the wrapper from the names before loading (" +
                    (prefix.empty() ? std::string("remove its components from each key")
                                    : "torch.nn.modules.utils.consume_prefix_in_state_dict_if_"
                                      "present(state_dict, '" +
                                          prefix + "') strips prefix '" + prefix + "'") +
                    "), or save the unwrapped module's state_dict (model.module, "
                    "model._orig_mod); shardscope-cli fix writes a copy under the model's names.";
        }
        return found;
    }

    // A prefix on every stored key that the model's names lack, or the reverse (a base model's
    // state dict for a model that keeps it under model.): found once from all the names.
    bool keyPrefix(DiffEntry &e, const Request &q, const std::string &state)
    {
        std::call_once(m_keyPrefixOnce, [&] {
            // State dicts only: Megatron's formats have their own wrappers (wrapper_prefix).
            if (m_megatronLoader || m_legacy)
                return;
            std::vector<std::string_view> stored, wanted;
            for (uint32_t i : m_disk.modelKeys)
                stored.push_back(m_disk.keys[i].key);
            for (const Expanded &x : m_params)
                wanted.push_back(x.param.name);
            m_keyPrefix = detail::commonKeyPrefix(stored, wanted);
        });
        if (!m_keyPrefix)
            return false;
        const detail::KeyPrefix &kp = *m_keyPrefix;
        const std::string quoted = "'" + kp.prefix + "'";
        const bool found = underOtherNames(
            e, q, state, "key_prefix", [&](const std::string &n) { return kp.storedName(n); },
            kp.stored
                ? "every stored key carries the prefix " + quoted +
                      ", which the model's names do not"
                : "the model's names carry the prefix " + quoted + ", which the stored keys do not",
            kp.stored
                ? "Strip prefix " + quoted +
                      " from every key (torch.nn.modules.utils.consume_prefix_in_state_dict_if_"
                      "present(state_dict, " +
                      quoted +
                      ")), or load into the module that was saved; shardscope-cli fix "
                      "writes a copy under the model's names."
                : "Add prefix " + quoted + " to every key ({" + quoted +
                      " + k: v for k, v in state_dict.items()}), or load it into the submodule "
                      "that was saved (model." +
                      kp.prefix.substr(0, kp.prefix.size() - 1) +
                      ".load_state_dict(state_dict)); shardscope-cli fix writes a copy under the "
                      "model's names.");
        return found;
    }

    // An output layer saved tied to the embedding (one tensor, stored once) for a model that
    // unties them: the embedding's bytes are the output layer's values.
    bool tiedOutput(DiffEntry &e, const LayoutParam &p, const Request &q, const std::string &state)
    {
        if (q.pieces.size() != 1)
            return false;
        for (const std::string &emb : detail::tiedEmbeddingsOf(p.name)) {
            const DiskKey *k = m_disk.findModel(emb);
            if (!k || !k->tensor || k->tensor->shape != q.pieces[0].shape)
                continue;
            return underOtherNames(
                e, q, state, "tied_output", [&](const std::string &) { return emb; },
                "the checkpoint was saved with the output layer tied to the embedding: one "
                "tensor, stored once; this model unties them",
                "Build the model with tied embeddings (tie_word_embeddings: true; Megatron: "
                "without --untie-embeddings-and-output-weights), or give the output layer its "
                "own copy of " +
                    emb +
                    " (shardscope-cli fix writes it over the same bytes): the untied output "
                    "layer then starts from the embedding's values, as the saving run used it.");
        }
        return false;
    }

    // A key a shard index lists whose shard is missing or unreadable: the load raises on it.
    bool listedButUnreadable(DiffEntry &e, const Request &q)
    {
        const auto it = m_keyProblems.find(q.pieces.front().name);
        if (it == m_keyProblems.end())
            return false;
        const Problem &pr = *it->second;
        const auto slash = pr.file.find_last_of('/');
        const std::string file = pr.file.substr(slash == std::string::npos ? 0 : slash + 1);
        e.status = LoadStatus::Unreadable;
        e.realLoadFills = false;
        e.reason = q.pieces.front().name + ": the index lists it in " + file + ": " + pr.message +
                   "; the load raises opening it (" + pr.file + ")";
        e.fix = "Restore " + file +
                " (a download or copy that stopped early: fetch the shard again), or load "
                "another copy of the checkpoint.";
        return true;
    }

    bool expertsForm(DiffEntry &e, const Request &q, const std::string &state)
    {
        return underOtherNames(
            e, q, state, "experts_form", detail::otherExpertForm,
            "the other expert form: grouped vs sequential",
            "Build the model with the expert form the checkpoint was saved with "
            "(--moe-grouped-gemm for linear_fc1.weight<e>, without it for local_experts.<e>.), "
            "or rename the keys with checkpoint_inspector.py modify-state-dict --op \"rename "
            "OLD NEW\".");
    }

    // Fused (unsplit) tensors on disk: a fused parameter stored whole under its own name, or an
    // unfused parameter that is a section of a fused stored tensor.
    bool fusedOnDisk(DiffEntry &e, const LayoutParam &p, const Request &q, const std::string &state)
    {
        std::vector<DiskKey *> found;
        // a) a fused parameter, stored fused
        if (p.fusion || !p.absorbs.empty()) {
            for (const std::string &inner :
                 {std::string(".transformer_layer."), "." + m_layout.mtpInner + "."}) {
                Request whole;
                whole.pieces.push_back(
                    {replaceAll(p.name, "." + m_layout.mtpInner + ".", inner), p.shape, 0, 0, 0});
                if (!lookup(whole, state, found))
                    continue;
                e.rules = {"fused_on_disk"};
                fillSources(e, whole, found);
                judge(e, whole, found, state, LoadStatus::Merge);
                if (e.status == LoadStatus::Merge) {
                    const std::string rule = p.fusion ? p.fusion->rule : "mla_down_proj";
                    e.reason = "stored fused as " + std::string(found.front()->key) +
                               " (saved without the " + rule + " split); the load asks for " +
                               e.requestKeys.front() +
                               (e.requestKeys.size() > 1 ? " and its other sections" : "");
                    e.fix = "Re-save the checkpoint with a Megatron-LM whose save runs " +
                            handlerOf(rule) +
                            " (or convert torch_dist checkpoints with checkpoint_inspector.py "
                            "convert-torch-dist-to-fsdp-dtensor" +
                            (rule == "swiglu" ? std::string(" --swiglu") : std::string()) +
                            "); ShardScope can cut the sections out of the fused tensor.";
                }
                return true;
            }
        }
        // b) an unfused parameter that is a section of a stored fused tensor
        struct Family
        {
            std::vector<std::string> parts;
            std::string fused;
        };
        static const std::vector<Family> families = {
            {{".self_attention.linear_q_down_proj.weight",
              ".self_attention.linear_kv_down_proj.weight"},
             ".self_attention.linear_qkv_down_proj.weight"},
            {{".weight_w", ".weight_v"}, ".weight"},
            {{".bias_w", ".bias_v"}, ".bias"},
            {{".weight.query", ".weight.key", ".weight.value", ".weight.z", ".weight.beta",
              ".weight.alpha"},
             ".weight"},
        };
        const std::string name = q.pieces.size() == 1 ? q.pieces.front().name : std::string();
        if (name.empty())
            return false;
        // The absorbed input norm of a fused MLA down projection.
        if (name.ends_with(".input_layernorm.weight")) {
            const std::string layer = name.substr(0, name.size() - 23);
            Request alt;
            alt.pieces.push_back({layer + ".self_attention.linear_qkv_down_proj.layer_norm_weight",
                                  p.shape, 0, 0, 0});
            if (lookup(alt, state, found)) {
                e.rules = {"fused_on_disk"};
                fillSources(e, alt, found);
                judge(e, alt, found, state, LoadStatus::Rename);
                e.realLoadFills = false;
                e.reason = "stored as " + std::string(found.front()->key) +
                           " (the norm absorbed into the fused down projection)";
                e.fix = "Build the model with the fused MLA down projection "
                        "(--mla-down-proj-fusion) to load this checkpoint, or re-save it with "
                        "a Megatron-LM that runs " +
                        handlerOf("mla_down_proj") + ".";
                return true;
            }
        }
        // SwiGLU halves of grouped experts: linear_fc1.weight<e>_w / _v ↔ linear_fc1.weight<e>.
        static const std::regex gluHalf(R"(^(.*\.(weight|bias)\d*)_([wv])$)");
        std::smatch glu;
        std::vector<Family> local = families;
        if (std::regex_match(name, glu, gluHalf) && !glu[1].str().ends_with(".weight") &&
            !glu[1].str().ends_with(".bias")) {
            const std::string tail = glu[1].str().substr(glu[1].str().rfind('.'));
            local.push_back({{tail + "_w", tail + "_v"}, tail});
        }
        for (const Family &f : local) {
            for (size_t i = 0; i < f.parts.size(); ++i) {
                if (!name.ends_with(f.parts[i]))
                    continue;
                const std::string stem = name.substr(0, name.size() - f.parts[i].size());
                DiskKey *k = find(stem + f.fused, state);
                if (!k || !k->tensor || k->tensor->shape.empty())
                    return false;
                // Row offset: the sizes of the sections before this one, from the layout's
                // siblings (or what is left over for the last section).
                int64_t begin = 0;
                bool known = true;
                for (size_t j = 0; j < i; ++j) {
                    auto it = m_byName.find(stem + f.parts[j]);
                    if (it == m_byName.end() || it->second->shape.empty()) {
                        known = false;
                        break;
                    }
                    begin += it->second->shape[0];
                }
                if (!known && i + 1 == f.parts.size() && !p.shape.empty())
                    begin = k->tensor->shape[0] - p.shape[0], known = true;
                if (!known || p.shape.empty())
                    return false;
                const int64_t rows = state == "step" ? 0 : p.shape[0];
                e.rules = {"fused_on_disk"};
                mark(k->used);
                // The whole parameter (rows [0, rows)) from the stored rows [begin, …).
                e.sources.push_back({std::string(k->key),
                                     k->tensor->shape,
                                     k->tensor->dtypeName,
                                     0,
                                     0,
                                     rows,
                                     begin,
                                     {},
                                     entryOf(k)});
                std::vector<int64_t> rest(k->tensor->shape.begin() + 1, k->tensor->shape.end());
                std::vector<int64_t> want(p.shape.begin() + 1, p.shape.end());
                if (state != "step" && (begin + rows > k->tensor->shape[0] || rest != want)) {
                    e.status = LoadStatus::ShapeMismatch;
                    e.reason = "stored fused as " + std::string(k->key) + " " +
                               shapeText(k->tensor->shape) + ", which has no rows " +
                               std::to_string(begin) + ".." + std::to_string(begin + rows) +
                               " of shape " + shapeText(p.shape);
                    e.fix = detail::shapeMismatchFix(std::string(k->key), k->tensor->shape, [&] {
                        std::vector<int64_t> w = p.shape;
                        if (!w.empty())
                            w[0] = k->tensor->shape[0];
                        return w;
                    }());
                    return true;
                }
                e.status = LoadStatus::Merge;
                e.reason = "stored fused with its sibling sections in " + std::string(k->key) +
                           " rows " + std::to_string(begin) + ".." + std::to_string(begin + rows) +
                           "; the load asks for " + e.requestKeys.front();
                e.fix = "Build the model fused like the saving run (e.g. --mla-down-proj-fusion "
                        "for linear_qkv_down_proj), or re-save the checkpoint with the split "
                        "handlers; ShardScope can cut the section out.";
                return true;
            }
        }
        return false;
    }

    const CheckpointIndex &m_index;
    const Layout &m_layout;
    const DiffOptions &m_options;
    Disk m_disk;
    std::vector<Expanded> m_params;
    std::unordered_map<std::string, const LayoutParam *> m_byName;
    std::unordered_set<std::string> m_stackedNames; // layer index dropped, see above
    bool m_torchDist = false;
    bool m_megatronLoader = false;       ///< the format's loader runs Megatron's handlers
    bool m_fsdpDtensorLoad = false;      ///< detail::fsdpDtensorLoad(index)
    bool m_legacy = false;               ///< Megatron's legacy torch format: one file per rank
    int m_tpDim = -1, m_tpLocalSize = 1; ///< while judging TP-local shards (legacy)
    std::set<std::string> m_legacyDirs, m_legacyDirsRead; ///< rank directories there, read
    std::vector<std::string> m_legacyMissingFiles;        ///< rank files the load needs, absent
    std::vector<int> m_legacyStageEnds;
    std::unordered_map<std::string, uint32_t> m_extraStateKeys; ///< stored `_extra_state` keys
    bool m_stackedLayers = false; ///< torch_dist keys with a layer axis (decoder.layers.<name>)
    /** saved_prefix: a stored name with its wrappers' components removed → the stored name. */
    std::unordered_map<std::string, std::string> m_unwrapped;
    std::once_flag m_unwrappedOnce;
    /** key_prefix: the prefix on every stored key, or on every name of the model's. */
    std::optional<detail::KeyPrefix> m_keyPrefix;
    std::once_flag m_keyPrefixOnce;
    /** Keys listed by a shard index whose file is missing or unreadable (no tensor). */
    std::unordered_map<std::string, const Problem *> m_keyProblems;
    /** Some key has a layer or expert axis: else findStacked() (regexes) cannot succeed. */
    bool m_mayBeStacked = false;
    std::vector<int> m_stageEnds; ///< set when the load names decoder layers per stage
    int m_maxStageLayers = 0;     ///< the most layers a stage holds (its local names' range)
    int m_decoderLayers = 0;      ///< the model's
};

} // namespace

Result<DiffResult> diffAgainstLayout(const CheckpointIndex &checkpoint, const Layout &layout,
                                     const DiffOptions &options,
                                     const std::function<bool(uint64_t, uint64_t)> &progress)
{
    for (const std::string &r : options.disabledRules) {
        const auto &rules = allRules();
        if (std::none_of(rules.begin(), rules.end(),
                         [&](const RuleInfo &i) { return i.name == r; }))
            return makeError(Error::Code::NotFound, "unknown rule '" + r + "'");
    }
    std::optional<DiffResult> r = Differ(checkpoint, layout, options).run(progress);
    if (!r)
        return makeError(Error::Code::Cancelled, "cancelled");
    r->against = layout.source;
    return std::move(*r);
}

} // namespace shardscope
