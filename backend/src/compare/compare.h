// SPDX-License-Identifier: MIT
// The value comparison's stages: the layout that names the tensors of both sides (pivot.cpp),
// where each side keeps each tensor's values (pairs.cpp, hfllama.cpp), and the comparison of
// the pairs, streamed under a memory budget (engine.cpp, blockdiff.cpp).
#pragma once

#include "shardscope/checkpoint.h"
#include "shardscope/diff.h"
#include "shardscope/distributed.h"
#include "shardscope/layout.h"
#include "shardscope/valuediff.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shardscope::detail {

/** The layout both sides are read through, and what it came from (for the output). */
struct Pivot
{
    Layout layout;
    std::string source;
};

/**
 * `layoutPath` when given; else, when one side is a Hugging Face Llama-family set and the other
 * is not, the other side's saved Megatron arguments or the Hugging Face config; when a side is
 * torch_dist (stacked keys), its saved arguments; otherwise the first checkpoint's own tensors,
 * with the fusions the second one's split keys show.
 */
Result<Pivot> pivotLayout(const CheckpointIndex &a, const CheckpointIndex &b,
                          const std::string &layoutPath);

/** Where one side keeps a tensor's values: row ranges of stored keys, in one stored dtype. */
struct SideValues
{
    std::vector<DiffSource> sources;
    std::string dtype;
};

struct TensorPair
{
    std::string name, state;
    std::vector<int64_t> shape;
    std::optional<SideValues> a, b;
    std::string why;         ///< not comparable: why (a side missing, no mapping known)
    bool unreadable = false; ///< a side's data cannot be read
};

/** The config.json in a checkpoint's directory (or beside its file); it may not exist. */
std::string configBeside(const CheckpointIndex &c);

/** Megatron-Bridge's Llama-family mapping of a Hugging Face checkpoint (hfllama.cpp). */
struct HfLlama
{
    int64_t heads = 0, groups = 0, headDim = 0;
};
/** A Hugging Face Llama-family safetensors (or torch.save) checkpoint with its config.json. */
std::optional<HfLlama> hfLlamaOf(const CheckpointIndex &index);
/** Where the Hugging Face checkpoint keeps the Megatron tensor `name`; nullopt with `why`. */
std::optional<SideValues> hfValues(const HfLlama &hf, const CheckpointIndex &index,
                                   const std::string &name, const std::vector<int64_t> &shape,
                                   std::string &why);

/** Every tensor of the layout (and its optimizer states) with where each side keeps it. */
Result<std::vector<TensorPair>> pairTensors(const CheckpointIndex &a, const CheckpointIndex &b,
                                            const Layout &layout, const DiffOptions &options,
                                            bool includeOptimizer);

struct CompareOptions
{
    double rtol = 0, atol = 0;
    uint64_t maxMemory = 0; ///< bytes for both sides' blocks, all threads together
    int threads = 0;        ///< 0: one per core
    bool useGpu = true;
    Communicator *comm = nullptr;
    std::function<bool(uint64_t done, uint64_t total)> progress;
};

/** Compares every pair; the same results whatever the threads and processes. */
Result<ValueDiffResult> compareValues(const CheckpointIndex &a, const CheckpointIndex &b,
                                      const std::vector<TensorPair> &pairs,
                                      const CompareOptions &options);

} // namespace shardscope::detail
