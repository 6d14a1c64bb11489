// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/result.h"

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace shardscope {

/** Where this process stands in a job started by torchrun or srun. */
struct LaunchInfo
{
    int rank = 0, worldSize = 1, localRank = 0;
    std::string masterAddr;
    int masterPort = 0;
    std::string launcher; ///< "torchrun" (RANK, WORLD_SIZE…) or "srun" (SLURM_PROCID…)
};

/**
 * Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (torchrun), or SLURM_PROCID,
 * SLURM_NTASKS and SLURM_LOCALID with MASTER_ADDR and MASTER_PORT (srun). nullopt when the
 * process was not started as part of a job; an error names a variable that is missing or wrong.
 */
Result<std::optional<LaunchInfo>> launchFromEnvironment();

enum class CommBackend : uint8_t {
    Auto, ///< NCCL when this build has CUDA and the rank has a GPU, else Gloo
    Gloo,
    Nccl
};

/**
 * Collectives among a job's processes, over libtorch's c10d (a TCPStore served by rank 0, then a
 * Gloo or NCCL process group). Byte-level, so no torch type crosses this header. Every rank must
 * make the same calls in the same order.
 */
class Communicator
{
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string backend() const = 0; ///< "gloo" or "nccl"
    /** Every rank's `in` (the same length on every rank) into `out`, in rank order. */
    virtual Status allgather(std::span<const std::byte> in, std::span<std::byte> out) = 0;
    /** Every rank's text, on every rank, in rank order. */
    Result<std::vector<std::string>> allgatherText(const std::string &text);
    virtual Status barrier() = 0;
};

Result<std::unique_ptr<Communicator>>
connect(const LaunchInfo &launch, CommBackend backend = CommBackend::Auto,
        std::chrono::seconds timeout = std::chrono::minutes(5));

} // namespace shardscope
