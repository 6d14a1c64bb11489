// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/distributed.h"
#include "shardscope/health.h"
#include "shardscope/loadplan.h"
#include "shardscope/tensor.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardscope {

struct VerifyOptions
{
    /** Called now and then with bytes done and total; return false to stop (cancel). */
    std::function<bool(uint64_t done, uint64_t total)> progress;
    /**
     * Bytes the verification may hold at once; 0 = no limit. A parameter that needs more streams
     * through windows of rows that fit (its statistics, fingerprint and hash come out the same;
     * the histogram takes a second pass). Only one whose smallest window (the rows of 4096
     * elements) does not fit is reported, not read.
     */
    uint64_t maxMemory = 0;
    bool hash = false; ///< SHA-256 of each gathered parameter
    /** Where the health kernels run: the GPU when one is there (and this build has CUDA). */
    bool useGpu = true;
    /**
     * A job of several processes (torchrun, srun): this process performs only its own rank's
     * reads, the shards are all-gathered over it, each parameter is checked by one rank in
     * turn, and every rank ends with the whole result. Null: one process plays every rank.
     */
    Communicator *comm = nullptr;
    /**
     * Threads that check parameters side by side in one process (0: one per core), each with
     * an equal part of maxMemory; fewer when the largest parameter would not fit its part
     * whole. Across processes each process checks on one thread.
     */
    int threads = 0;
    /** Flag loaded values that look like a fresh init (Megatron's init_method_std; 0: never). */
    double initStd = 0.02;
};

/** One parameter, reassembled from every rank's shard. */
struct ParamCheck
{
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    enum class Outcome : uint8_t {
        Identical,
        Mismatch,
        KeptInitial,
        Skipped,
        Unreadable, ///< its stored data cannot be read: the real load raises
        /** Loaded bit for bit, but from a key that holds another parameter's data (the diff's
         *  wrong_source: another stage's layer under stage-local names, another EP rank's). */
        WrongSource,
        /** Not planned, with why in the note: a buffer (loaded whole by every rank, nothing to
         *  gather), an empty parameter. The diff's verdict on it is in the note. */
        NotChecked
    } outcome = Outcome::Identical;
    uint64_t mismatches = 0;    ///< elements that differ from the direct read
    int64_t firstMismatch = -1; ///< flat element index
    bool roundTrip = true;      ///< re-splitting each rank's shard gives the stored bytes back
    int ranksHolding = 0;
    bool sourced = true;     ///< the load fills it (false: it must keep its initial values)
    TensorHealth health;     ///< statistics, histogram, fingerprint (our kernels)
    std::string fingerprint; ///< TensorHealth::fingerprint, hex
    std::string sha256;      ///< with VerifyOptions::hash
    std::string note;
};
std::string_view outcomeName(ParamCheck::Outcome o);

struct VerifyResult
{
    int world = 1;       ///< ranks planned (tp × dp × pp)
    int processes = 1;   ///< processes that performed them
    int threads = 1;     ///< threads that checked parameters side by side in each process
    std::string backend; ///< the collectives' ("gloo", "nccl"); empty in one process
    size_t checked = 0, identical = 0, mismatched = 0, roundTripFailures = 0, keptInitial = 0;
    size_t unreadable = 0;  ///< parameters whose data cannot be read (not counted as checked)
    size_t wrongSource = 0; ///< checked and loaded, from a key holding another one's data
    size_t notChecked = 0;  ///< layout entries the plan leaves out (buffers, empty), named
    std::vector<ParamCheck> params;
    uint64_t bytesRead = 0;
    double seconds = 0;
    bool cancelled = false;
    bool clean() const
    {
        return mismatched == 0 && roundTripFailures == 0 && keptInitial == 0 && unreadable == 0 &&
               wrongSource == 0;
    }
};

/**
 * Performs the planned load on the CPU, every rank's shards in turn: reads exactly the planned
 * boxes, assembles each rank's local shard (fused parameters through the flat-slice
 * intersection), gathers the shards into the full parameter and compares it bit for bit with an
 * independent direct read of its stored components; re-splits each rank's shard the way the save
 * path does and compares with the stored bytes; parameters without a source must keep their
 * initial values (they are filled with a known pattern first).
 */
Result<VerifyResult> verifyLoad(const CheckpointIndex &checkpoint, const Layout &layout,
                                const DiffResult &diff, const LoadPlan &plan,
                                const VerifyOptions &options = {});

} // namespace shardscope
