// SPDX-License-Identifier: MIT
// What the real load does with a diff's findings: Megatron's planning and checks under the
// chosen strictness (docs/formats.md §6.11), then the reads that raise.
#include "diff/loadoutcome.h"

#include <algorithm>
#include <cstdio>

namespace shardscope::detail {

namespace {

LoadOutcome plannedOutcome(const DiffResult &r, Format format, const DiffOptions &options)
{
    LoadOutcome o;
    std::vector<std::string> missingModel, missingOptimizer, firstRequest;
    bool sizeMismatch = false;
    std::string mismatchKey;
    for (const DiffEntry &e : r.entries) {
        if (e.realLoadFills)
            continue;
        if (e.section == Section::Other)
            continue;        // optimizer groups: not tensors a load fills
        if (e.wrongSource) { // the key exists: nothing raises, the data is wrong
            o.loadedWrong.push_back(e.name);
            continue;
        }
        if (e.status == LoadStatus::Unreadable || e.status == LoadStatus::Partial)
            continue; // requested and present: planning passes (loadOutcome() has them)

        // A mismatch under a requested key makes DCP's planner raise, whatever the mode.
        const bool mismatch = e.status == LoadStatus::ShapeMismatch && !e.sources.empty() &&
                              !e.requestKeys.empty() &&
                              e.sources.front().key == e.requestKeys.front();
        if (mismatch && !sizeMismatch) {
            sizeMismatch = true;
            mismatchKey = e.requestKeys.empty() ? e.name : e.requestKeys.front();
        }
        (e.section == Section::Model ? missingModel : missingOptimizer).push_back(e.name);
        if (firstRequest.empty() && !e.requestKeys.empty())
            firstRequest.push_back(e.requestKeys.front());
    }
    if (missingModel.empty() && missingOptimizer.empty()) {
        if (!o.loadedWrong.empty()) {
            o.action = LoadOutcome::Action::Silent;
            o.message = "the load finishes without a word, but " +
                        std::to_string(o.loadedWrong.size()) +
                        " tensors are filled from another EP rank's experts";
        }
        return o;
    }
    if (sizeMismatch) {
        o.action = LoadOutcome::Action::Raises;
        o.message = "ValueError: Size mismatch between saved and current shapes for " +
                    mismatchKey + " (DCP's planner checks every requested tensor)";
        o.namedKeys = {mismatchKey};
        return o;
    }
    const bool torchDist = format == Format::MegatronTorchDist;
    if (!torchDist && options.strictLoad) {
        o.action = LoadOutcome::Action::Raises;
        o.message = "RuntimeError: Missing key in checkpoint state_dict: " +
                    (firstRequest.empty() ? std::string("?") : firstRequest.front()) +
                    ". (strict fsdp_dtensor load: DefaultLoadPlanner(allow_partial_load="
                    "False); pass --no-strict-fsdp-dtensor-load for a partial load)";
        o.namedKeys = firstRequest;
        return o;
    }
    const Strictness s = options.strictness;
    auto keep = [&] {
        o.keptAtInit = missingModel;
        o.optimizerKeptAtInit = missingOptimizer;
    };
    // Megatron names at most 20 keys (validate_fsdp_dtensor_model_load max_reported).
    std::vector<std::string> named(
        missingModel.begin(), missingModel.begin() + std::min<size_t>(missingModel.size(), 20));
    if (missingModel.empty()) {
        // The model check passes; a partial load skips missing optimizer state silently.
        o.action = LoadOutcome::Action::Silent;
        o.message = "the model loads; " + std::to_string(missingOptimizer.size()) +
                    " optimizer states are not in the checkpoint and keep their initial "
                    "values (strictness checks only model keys)";
        keep();
        return o;
    }
    switch (s) {
    case Strictness::IgnoreAll:
        o.action = LoadOutcome::Action::Silent;
        o.message = "ignore_all: no check; the load finishes and " +
                    std::to_string(missingModel.size()) +
                    " parameters silently keep their initial values";
        keep();
        break;
    case Strictness::LogUnexpected:
    case Strictness::LogAll:
        o.action = LoadOutcome::Action::LogsAndContinues;
        o.message = std::string(strictnessName(s)) + ": logs a warning naming " +
                    std::to_string(missingModel.size()) +
                    " missing keys, then finishes with them at their initial values";
        o.namedKeys = named;
        keep();
        break;
    case Strictness::ReturnUnexpected:
    case Strictness::ReturnAll:
        o.action = LoadOutcome::Action::ReturnsAndContinues;
        o.message = std::string(strictnessName(s)) + ": returns " +
                    std::to_string(missingModel.size()) +
                    " missing keys to the caller and finishes with them at their initial "
                    "values";
        o.namedKeys = missingModel;
        keep();
        break;
    case Strictness::AssumeOkUnexpected:
    case Strictness::RaiseUnexpected:
    case Strictness::RaiseAll:
        o.action = LoadOutcome::Action::Raises;
        o.message = std::string("CheckpointingException (") + std::string(strictnessName(s)) +
                    "): " + std::to_string(missingModel.size()) +
                    " model keys are not in the checkpoint";
        o.namedKeys = named;
        break;
    }
    return o;
}

} // namespace

LoadOutcome loadOutcome(const DiffResult &r, Format format, const DiffOptions &options)
{
    LoadOutcome o = plannedOutcome(r, format, options);
    if (o.action == LoadOutcome::Action::Raises)
        return o; // raised before reading anything
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
