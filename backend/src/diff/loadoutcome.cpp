// SPDX-License-Identifier: MIT
// What the real load does with a diff's findings: Megatron's planning and checks under the
// chosen strictness (docs/formats.md §6.11), then the reads that raise.
#include "diff/loadoutcome.h"

#include <algorithm>
#include <cstdio>

namespace shardscope::detail {

namespace {

std::string torchSize(const std::vector<int64_t> &shape)
{
    std::string s = "torch.Size([";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "])";
}

std::string pyTuple(const std::vector<int64_t> &shape)
{
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

// Python's repr of a list or set of names, capped so that a message stays readable.
std::string pyNames(const std::vector<std::string> &names, char open, char close, size_t cap = 50)
{
    if (names.empty() && open == '{')
        return "set()";
    std::string s(1, open);
    for (size_t i = 0; i < names.size() && i < cap; ++i)
        s += (i ? ", '" : "'") + names[i] + "'";
    if (names.size() > cap)
        s += ", … (" + std::to_string(names.size() - cap) + " more)";
    return s + close;
}

std::string quotedNames(const std::vector<std::string> &names, size_t cap = 50)
{
    std::string s;
    for (size_t i = 0; i < names.size() && i < cap; ++i)
        s += (i ? ", \"" : "\"") + names[i] + "\"";
    if (names.size() > cap)
        s += ", … (" + std::to_string(names.size() - cap) + " more)";
    return s;
}

// The stored and the requested shape of a shape mismatch, both whole (a stacked torch_dist key's
// leading axes included).
std::pair<std::vector<int64_t>, std::vector<int64_t>> mismatchShapes(const DiffEntry &e)
{
    const DiffSource &src = e.sources.front();
    std::vector<int64_t> want(src.shape.begin(),
                              src.shape.begin() +
                                  std::ptrdiff_t(std::min(src.index.size(), src.shape.size())));
    want.insert(want.end(), e.shape.begin(), e.shape.end());
    return {src.shape, want};
}

// A request that fails planning: its key is absent, or present with another shape.
struct Failure
{
    const DiffEntry *entry;
    bool mismatch;
    std::string key; // what the load asks for
};

struct Findings
{
    std::vector<Failure> failures; // in request order
    std::vector<std::string> missingModel, missingOptimizer;
    std::vector<std::string> missingGroups; // param_to_group_meta requests without an entry
    std::vector<std::string> loadedWrong;
};

Findings findings(const DiffResult &r)
{
    Findings f;
    for (const DiffEntry &e : r.entries) {
        if (e.section == Section::Other && e.state == "param_group" &&
            e.status == LoadStatus::Unloadable && !e.requestKeys.empty()) {
            // Requested like any key (DCP plans it), though no tensor keeps its initial values.
            f.failures.push_back({&e, false, e.requestKeys.front()});
            f.missingGroups.push_back(e.param);
            continue;
        }
        if (e.realLoadFills || e.section == Section::Other)
            continue;        // optimizer groups: not tensors a load fills
        if (e.wrongSource) { // the key exists: nothing raises, the data is wrong
            f.loadedWrong.push_back(e.name);
            continue;
        }
        if (e.status == LoadStatus::Unreadable || e.status == LoadStatus::Partial)
            continue; // requested and present: planning passes (loadOutcome() has them)
        const bool mismatch = e.status == LoadStatus::ShapeMismatch && !e.sources.empty() &&
                              !e.requestKeys.empty() &&
                              e.sources.front().key == e.requestKeys.front();
        f.failures.push_back(
            {&e, mismatch, e.requestKeys.empty() ? e.name : e.requestKeys.front()});
        if (!e.tiedTo.empty()) // requested and absent, but its tensor is filled through the tie
            continue;
        (e.section == Section::Model ? f.missingModel : f.missingOptimizer).push_back(e.name);
    }
    return f;
}

void keep(LoadOutcome &o, const Findings &f)
{
    o.keptAtInit = f.missingModel;
    o.optimizerKeptAtInit = f.missingOptimizer;
}

// torch.distributed.checkpoint's DefaultLoadPlanner (plain DCP, and fsdp_dtensor's strict
// load): the first request in order that is absent or of another size raises.
LoadOutcome dcpPlanner(const Findings &f, bool allowPartial, const std::string &partialHint)
{
    LoadOutcome o;
    for (const Failure &x : f.failures) {
        if (x.mismatch) {
            const auto [stored, want] = mismatchShapes(*x.entry);
            o.action = LoadOutcome::Action::Raises;
            o.message = "ValueError: Size mismatch between saved " + torchSize(stored) +
                        " and current: " + torchSize(want) + " for " + x.key;
            o.namedKeys = {x.key};
            return o;
        }
        if (!allowPartial) {
            o.action = LoadOutcome::Action::Raises;
            o.message =
                "RuntimeError: Missing key in checkpoint state_dict: " + x.key + "." + partialHint;
            o.namedKeys = {x.key};
            return o;
        }
    }
    return o;
}

// Megatron-FSDP's fsdp_dtensor load (docs/formats.md §6.11): DCP's planner when strict, else
// validate_fsdp_dtensor_model_load under the strictness.
LoadOutcome fsdpDtensorOutcome(const Findings &f, const DiffOptions &options)
{
    LoadOutcome o = dcpPlanner(f, !options.strictLoad,
                               " (strict fsdp_dtensor load: DefaultLoadPlanner(allow_partial_load="
                               "False); pass --no-strict-fsdp-dtensor-load for a partial load)");
    if (o.action == LoadOutcome::Action::Raises || f.failures.empty())
        return o;
    const Strictness s = options.strictness;
    // Megatron names at most 20 keys (validate_fsdp_dtensor_model_load max_reported).
    std::vector<std::string> named(f.missingModel.begin(),
                                   f.missingModel.begin() +
                                       std::ptrdiff_t(std::min<size_t>(f.missingModel.size(), 20)));
    // A partial load keeps the request's own value of a missing group: this run's.
    const std::string groups =
        f.missingGroups.empty()
            ? ""
            : "; " + std::to_string(f.missingGroups.size()) +
                  " parameters' optimizer groups are not in the checkpoint and this run's "
                  "(lr, weight decay) stand for them";
    if (f.missingModel.empty()) {
        // The model check passes; a partial load skips missing optimizer state silently.
        o.action =
            f.missingOptimizer.empty() ? LoadOutcome::Action::Loads : LoadOutcome::Action::Silent;
        o.message = f.missingOptimizer.empty()
                        ? "the model and the optimizer state load" + groups
                        : "the model loads; " + std::to_string(f.missingOptimizer.size()) +
                              " optimizer states are not in the checkpoint and keep their "
                              "initial values (strictness checks only model keys)" +
                              groups;
        keep(o, f);
        return o;
    }
    const std::string n = std::to_string(f.missingModel.size());
    switch (s) {
    case Strictness::IgnoreAll:
        o.action = LoadOutcome::Action::Silent;
        o.message = "ignore_all: no check; the load finishes and " + n +
                    " parameters silently keep their initial values";
        keep(o, f);
        break;
    case Strictness::LogUnexpected:
    case Strictness::LogAll:
        o.action = LoadOutcome::Action::LogsAndContinues;
        o.message = std::string(strictnessName(s)) + ": logs a warning naming " + n +
                    " missing keys, then finishes with them at their initial values";
        o.namedKeys = named;
        keep(o, f);
        break;
    case Strictness::ReturnUnexpected:
    case Strictness::ReturnAll:
        o.action = LoadOutcome::Action::ReturnsAndContinues;
        o.message = std::string(strictnessName(s)) + ": returns " + n +
                    " missing keys to the caller and finishes with them at their initial values";
        o.namedKeys = f.missingModel;
        keep(o, f);
        break;
    case Strictness::AssumeOkUnexpected:
    case Strictness::RaiseUnexpected:
    case Strictness::RaiseAll:
        o.action = LoadOutcome::Action::Raises;
        o.message = std::string("CheckpointingException (") + std::string(strictnessName(s)) +
                    "): " + n + " model keys are not in the checkpoint";
        o.namedKeys = named;
        break;
    }
    return o;
}

// megatron.core.dist_checkpointing.load (0.16): validate_integrity_and_strict_load, then
// MCoreLoadPlanner's global shape check, then DCP's planner. "Unexpected" = requested, not
// stored; "missing" = stored, not requested (validation.py).
LoadOutcome torchDistLoad(const CheckpointIndex &index, const Findings &f,
                          const DiffOptions &options, const LoadContext &context)
{
    LoadOutcome o;
    const Strictness s = options.strictness;
    // The requests are Megatron's sharded keys already (a stacked key once for all its layers
    // and experts).
    std::vector<std::string> unexpected;
    std::vector<const Failure *> missingObjects;
    for (const Failure &x : f.failures) {
        if (x.mismatch)
            continue;
        // Megatron names a ShardedObject by its key, without the /shard_… of its unique key.
        std::string key = x.key.substr(0, x.key.find('/'));
        if (std::find(unexpected.begin(), unexpected.end(), key) == unexpected.end())
            unexpected.push_back(key);
        if (x.key.find('/') != std::string::npos)
            missingObjects.push_back(&x);
    }
    std::vector<std::string> notRequested;
    for (const std::string &k : context.unrequested) {
        std::string key = k.substr(0, k.find('/'));
        if (std::find(notRequested.begin(), notRequested.end(), key) == notRequested.end())
            notRequested.push_back(std::move(key));
    }
    const bool checksAll = s == Strictness::RaiseAll || s == Strictness::LogAll;
    if ((s == Strictness::RaiseUnexpected || s == Strictness::RaiseAll) &&
        (!unexpected.empty() || (checksAll && !notRequested.empty()))) {
        const bool both = checksAll && !notRequested.empty();
        std::string m = "CheckpointingException: ";
        if (both)
            m += "Some keys found in the checkpoint are missing in the provided sharded state "
                 "dict. ";
        if (!unexpected.empty())
            m += "Unexpected keys (not found in the checkpoint) encountered in the provided "
                 "sharded state dict. ";
        m += "\n";
        if (both)
            m += "Missing keys (for all ranks): " + pyNames(notRequested, '{', '}') + ". ";
        if (!unexpected.empty())
            m += "Unexpected keys (for this rank): " + pyNames(unexpected, '{', '}') + ". ";
        o.action = LoadOutcome::Action::Raises;
        o.message = std::move(m);
        o.namedKeys = unexpected;
        return o;
    }
    // Unexpected keys are dropped from the request unless the mode assumes there are none;
    // then every requested tensor's global shape is checked, in order.
    const bool dropsUnexpected = s != Strictness::AssumeOkUnexpected;
    for (const Failure &x : f.failures) {
        if (x.mismatch) {
            const auto [stored, want] = mismatchShapes(*x.entry);
            o.action = LoadOutcome::Action::Raises;
            o.message = "CheckpointingException: Global shape mismatch for loaded (" +
                        torchSize(stored) + ") and expected (" + pyTuple(want) +
                        ") tensor for key " + x.key;
            o.namedKeys = {x.key};
            return o;
        }
        if (!dropsUnexpected && x.key.find('/') == std::string::npos) {
            std::vector<std::string> stored;
            for (const TensorEntry &t : index.tensors)
                stored.push_back(t.key.str());
            for (const ObjectEntry &obj : index.objects)
                if (obj.location)
                    stored.push_back(obj.key.str());
            std::sort(stored.begin(), stored.end());
            const std::string &key = x.key;
            o.action = LoadOutcome::Action::Raises;
            o.message = "KeyError: \"" + key +
                        " from model not in state dict: " + pyNames(stored, '[', ']', 20) + "\"";
            o.namedKeys = {key};
            return o;
        }
    }
    if (!missingObjects.empty() && !dropsUnexpected) {
        o.action = LoadOutcome::Action::Raises;
        o.message =
            "RuntimeError: Missing key in checkpoint state_dict: " + missingObjects.front()->key +
            ".";
        o.namedKeys = {missingObjects.front()->key};
        return o;
    }
    if (unexpected.empty()) {
        if (checksAll && !notRequested.empty()) {
            o.action = LoadOutcome::Action::LogsAndContinues;
            o.message = "log_all: logs that " + std::to_string(notRequested.size()) +
                        " stored keys are not requested (\"Some keys found in the checkpoint "
                        "are missing in the provided sharded state dict.\"), and loads";
        }
        return o;
    }
    const std::string n = std::to_string(unexpected.size());
    keep(o, f);
    o.namedKeys = unexpected;
    switch (s) {
    case Strictness::LogUnexpected:
    case Strictness::LogAll:
        o.action = LoadOutcome::Action::LogsAndContinues;
        o.message = std::string(strictnessName(s)) +
                    ": logs \"Unexpected keys (not found in the checkpoint) encountered in the "
                    "provided sharded state dict.\" naming " +
                    n +
                    " keys, drops them from the load and finishes with them at their initial "
                    "values";
        break;
    case Strictness::ReturnUnexpected:
    case Strictness::ReturnAll:
        o.action = LoadOutcome::Action::ReturnsAndContinues;
        o.message = std::string(strictnessName(s)) + ": returns " + n +
                    " unexpected keys with the loaded state dict and finishes with them at "
                    "their initial values";
        break;
    default: // ignore_all
        o.action = LoadOutcome::Action::Silent;
        o.message = "ignore_all: drops " + n +
                    " keys the checkpoint lacks from the load without a word; they keep their "
                    "initial values";
        o.namedKeys.clear();
        break;
    }
    return o;
}

// torch.nn.Module.load_state_dict: missing, unexpected and size mismatches, in torch's words.
struct StateDictErrors
{
    std::vector<std::string> missing, unexpected, sizeMismatch;
};

StateDictErrors stateDictErrors(const Findings &f, const std::vector<std::string> &unrequested,
                                const std::string &entry = {})
{
    StateDictErrors e;
    for (const Failure &x : f.failures) {
        if (x.entry->section != Section::Model)
            continue; // load_state_dict is the model's; the optimizer loads on its own
        // Legacy keys are <rank dir>/model.<name>: the state dict is the file's `model`.
        const size_t in = x.key.find("/model.");
        std::string key = in == std::string::npos ? x.key : x.key.substr(in + 7);
        if (!entry.empty() && key.starts_with(entry))
            key.erase(0, entry.size());
        if (x.mismatch) {
            const auto [stored, want] = mismatchShapes(*x.entry);
            e.sizeMismatch.push_back(
                "size mismatch for " + key + ": copying a param with shape " + torchSize(stored) +
                " from checkpoint, the shape in current model is " + torchSize(want) + ".");
        } else {
            e.missing.emplace_back(key);
        }
    }
    e.unexpected = unrequested;
    return e;
}

std::string stateDictError(const std::string &model, const StateDictErrors &e, bool strict)
{
    std::vector<std::string> lines;
    if (strict && !e.missing.empty())
        lines.push_back("Missing key(s) in state_dict: " + quotedNames(e.missing) + ". ");
    if (strict && !e.unexpected.empty())
        lines.push_back("Unexpected key(s) in state_dict: " + quotedNames(e.unexpected) + ". ");
    lines.insert(lines.end(), e.sizeMismatch.begin(), e.sizeMismatch.end());
    std::string m = "RuntimeError: Error(s) in loading state_dict for " + model + ":";
    for (const std::string &l : lines)
        m += "\n\t" + l;
    return m;
}

// A torch.save or safetensors state dict given to model.load_state_dict(sd, strict).
LoadOutcome loadStateDict(const Findings &f, const DiffOptions &options,
                          const std::vector<std::string> &unrequested, const std::string &entry)
{
    LoadOutcome o;
    const StateDictErrors e = stateDictErrors(f, unrequested, entry);
    const bool strict = options.strictLoad;
    if (!e.sizeMismatch.empty() || (strict && (!e.missing.empty() || !e.unexpected.empty()))) {
        o.action = LoadOutcome::Action::Raises;
        o.message = stateDictError("<model>", e, strict);
        o.namedKeys = e.missing;
        return o;
    }
    if (!e.missing.empty() || !e.unexpected.empty()) {
        o.action = LoadOutcome::Action::ReturnsAndContinues;
        o.message = "load_state_dict(strict=False) returns _IncompatibleKeys(missing_keys=" +
                    pyNames(e.missing, '[', ']') +
                    ", unexpected_keys=" + pyNames(e.unexpected, '[', ']') + "); " +
                    std::to_string(e.missing.size()) +
                    " parameters keep their initial values (transformers' from_pretrained "
                    "logs them as \"newly initialized\")";
        o.namedKeys = e.missing;
        keep(o, f);
    }
    return o;
}

// Megatron's legacy torch format: load_model_state_dict (megatron/training/checkpointing.py)
// loads rank files' `model` with strict load_state_dict and, when that raises, retries with
// strict=False and prints what it returned; the non-strict load swallows its error.
LoadOutcome legacyLoad(const Findings &f, const DiffOptions &options,
                       const std::vector<std::string> &unrequested)
{
    LoadOutcome o;
    // The keys are <rank dir>/model.<name>; the state dict Megatron loads is the `model` entry.
    const StateDictErrors e = stateDictErrors(f, unrequested);
    if (e.missing.empty() && e.unexpected.empty() && e.sizeMismatch.empty())
        return o;
    if (options.strictLoad && !e.sizeMismatch.empty()) {
        o.action = LoadOutcome::Action::Raises;
        o.message = stateDictError("GPTModel", e, false) +
                    "\n(the strict load_state_dict raised; Megatron's retry with strict=False "
                    "raises this)";
        return o;
    }
    keep(o, f);
    o.namedKeys = e.missing;
    if (!options.strictLoad) {
        o.action = LoadOutcome::Action::Silent;
        o.message = "load_checkpoint(strict=False): load_state_dict(strict=False) " +
                    std::string(e.sizeMismatch.empty() ? "ignores"
                                                       : "raises on the size mismatches and "
                                                         "Megatron swallows the error, leaving") +
                    " " + std::to_string(f.missingModel.size()) +
                    " parameters at their initial values without a word";
        return o;
    }
    o.action = LoadOutcome::Action::LogsAndContinues;
    o.message = stateDictError("GPTModel", e, true) +
                "\nMegatron's load_model_state_dict catches this, retries with strict=False "
                "and prints load_return: _IncompatibleKeys(missing_keys=" +
                pyNames(e.missing, '[', ']') +
                ", unexpected_keys=" + pyNames(e.unexpected, '[', ']') + "); " +
                std::to_string(e.missing.size()) + " parameters keep their initial values";
    return o;
}

LoadOutcome plannedOutcome(const DiffResult &r, const CheckpointIndex &index,
                           const DiffOptions &options, const LoadContext &context)
{
    const std::vector<std::string> &unrequested = context.unrequested;
    const Findings f = findings(r);
    LoadOutcome o;
    switch (context.fsdpDtensorLoad ? Format::MegatronFsdpDtensor : index.format) {
    case Format::MegatronFsdpDtensor:
        o = fsdpDtensorOutcome(f, options);
        break;
    case Format::MegatronTorchDist:
        o = torchDistLoad(index, f, options, context);
        break;
    case Format::Dcp:
        o = dcpPlanner(f, !options.strictLoad,
                       " (dcp.load with DefaultLoadPlanner(allow_partial_load=False))");
        if (o.action == LoadOutcome::Action::Loads && !f.failures.empty()) {
            o.action = LoadOutcome::Action::Silent;
            o.message = "DefaultLoadPlanner(allow_partial_load=True) skips " +
                        std::to_string(f.failures.size()) +
                        " requested keys the checkpoint lacks; they keep their initial values";
            keep(o, f);
        }
        break;
    case Format::MegatronLegacy:
        o = legacyLoad(f, options, unrequested);
        break;
    case Format::TorchSave:
    case Format::Safetensors:
    case Format::SafetensorsIndex:
    case Format::TorchSaveIndex:
        o = loadStateDict(f, options, unrequested, context.stateDictEntry);
        break;
    }
    o.loadedWrong = f.loadedWrong;
    if (o.action == LoadOutcome::Action::Loads && !o.loadedWrong.empty()) {
        o.action = LoadOutcome::Action::Silent;
        o.message = "the load finishes without a word, but " +
                    std::to_string(o.loadedWrong.size()) +
                    " tensors are filled from keys that hold other parameters' data";
    }
    return o;
}

} // namespace

bool fsdpDtensorLoad(const CheckpointIndex &index)
{
    if (index.format == Format::MegatronFsdpDtensor)
        return true;
    if (index.format != Format::Dcp)
        return false;
    return std::any_of(index.tensors.begin(), index.tensors.end(),
                       [](const TensorEntry &t) { return t.key.starts_with("model.module."); });
}

LoadOutcome loadOutcome(const DiffResult &r, const CheckpointIndex &index,
                        const DiffOptions &options, const LoadContext &context)
{
    LoadOutcome o = plannedOutcome(r, index, options, context);
    if (!context.raisesFirst.empty()) { // megatron-core checks global shapes whatever the mode
        o = {};
        o.action = LoadOutcome::Action::Raises;
        o.message = context.raisesFirst;
        return o;
    }
    if (o.action == LoadOutcome::Action::Raises)
        return o; // raised before reading anything
    // FileSystemWriter's SAFETENSORS format (read/dcpsafetensors.cpp): torch's FileSystemReader
    // hands the first tensor item it reads to torch.load, which raises on a safetensors block.
    if (index.info.count("dcp.serialization_format"))
        for (const DiffEntry &e : r.entries)
            if (!e.sources.empty() && e.status != LoadStatus::Unreadable) {
                o = {};
                o.action = LoadOutcome::Action::Raises;
                o.message = "CheckpointException: FileSystemReader hands each item to "
                            "torch.load, which raises on a safetensors block "
                            "(serialization_format=SAFETENSORS); no torch reader loads it";
                o.namedKeys = {e.sources.front().key};
                return o;
            }
    size_t holes = 0;
    for (const DiffEntry &e : r.entries)
        if (e.status == LoadStatus::Partial && e.section != Section::Other) {
            (e.section == Section::Model ? o.keptAtInit : o.optimizerKeptAtInit).push_back(e.name);
            ++holes;
        }
    if (holes) {
        const std::string what =
            std::to_string(holes) +
            (holes == 1 ? " tensor has holes its chunks do not cover, left at its initial values"
                        : " tensors have holes their chunks do not cover, left at their "
                          "initial values");
        if (o.action == LoadOutcome::Action::Loads) {
            o.action = LoadOutcome::Action::Silent;
            o.message = "the load finishes without a word, but " + what;
        } else {
            o.message += "; " + what;
        }
    }
    for (const DiffEntry &e : r.entries)
        if (e.status == LoadStatus::Unreadable) {
            const std::string key = e.sources.empty() ? e.name : e.sources.front().key;
            o.action = LoadOutcome::Action::Raises;
            o.message = "CheckpointException: " + e.reason;
            // A state dict's files are opened by safetensors or torch.load: a shard the index
            // lists but that is not there raises what load_file (or torch.load) raises.
            if (index.format == Format::Safetensors || index.format == Format::SafetensorsIndex ||
                index.format == Format::TorchSaveIndex || index.format == Format::TorchSave) {
                o.message = e.reason;
                for (const Problem &p : index.problems)
                    if (p.key == key && p.effect == Problem::Effect::Unreadable &&
                        p.message == "shard file is missing") {
                        o.message = index.format == Format::TorchSaveIndex
                                        ? "FileNotFoundError: [Errno 2] No such file or "
                                          "directory: '" +
                                              p.file + "'"
                                        : "FileNotFoundError: No such file or directory: " + p.file;
                        break;
                    }
            }
            o.namedKeys = {key};
            o.keptAtInit.clear(); // the load does not finish
            o.optimizerKeptAtInit.clear();
            break;
        }
    return o;
}

} // namespace shardscope::detail

namespace shardscope {

void summariseCasts(DiffResult &diff)
{
    diff.lossyCasts = 0;
    const DiffEntry *worst = nullptr;
    std::string from, to;
    bool measured = false;
    for (const DiffEntry &e : diff.entries) {
        if (!e.narrowing)
            continue;
        measured = measured || e.castLoss.has_value();
        if (e.castLoss && e.castLoss->changed == 0)
            continue; // measured: every value survives the cast
        ++diff.lossyCasts;
        if (!e.sources.empty() && from.empty()) {
            from = e.sources.front().dtype;
            to = e.dtype;
        }
        if (e.castLoss && (!worst || e.castLoss->maxAbs > worst->castLoss->maxAbs))
            worst = &e;
    }
    std::erase_if(diff.outcome.warnings,
                  [](const std::string &w) { return w.starts_with("cast: "); });
    if (!diff.lossyCasts)
        return;
    std::string w = "cast: " + std::to_string(diff.lossyCasts) +
                    (diff.lossyCasts == 1 ? " tensor is" : " tensors are") + " loaded as " + to +
                    " from " + from;
    if (worst) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      ": the worst change is %.9g (%.3g relative), %lld of %lld values changed, "
                      "in ",
                      worst->castLoss->maxAbs, worst->castLoss->maxRel,
                      static_cast<long long>(worst->castLoss->changed),
                      static_cast<long long>(worst->castLoss->count));
        w += buf + worst->name;
    } else if (!measured) {
        w += ", which has fewer bits: values may change (--measure-casts reads them and measures "
             "the change)";
    }
    diff.outcome.warnings.push_back(std::move(w));
}

} // namespace shardscope
