// SPDX-License-Identifier: MIT
// libtorch lives in a module of its own (libshardscope_torchops.so), loaded on the first call
// that needs it: its static initialisation (every operator registered) costs each process about
// 0.3 s, which a diff, a fix by references or a cached open never need. The backend's public
// functions that use it forward through this table.
#pragma once

#include "shardscope/distributed.h"
#include "shardscope/tensor.h"

#include <chrono>
#include <memory>
#include <span>

namespace shardscope {

/** The module's implementations (tensorread.cpp, castloss.cpp, communicator.cpp). */
namespace torchmod {
Result<TensorData> readTensor(const CheckpointIndex &index, const TensorEntry &entry,
                              const Box &box);
Status readTensorInto(const CheckpointIndex &index, const TensorEntry &entry, const Box &box,
                      std::span<std::byte> out);
Result<bool> sameAsStored(const CheckpointIndex &index, const TensorEntry &entry, const Box &box,
                          std::span<const std::byte> expected);
Result<TensorStats> computeStats(const TensorData &data);
Result<CastLoss> measureCast(const TensorData &stored, DType to);
Result<TensorData> castTensor(const TensorData &data, DType to);
Result<std::unique_ptr<Communicator>> connect(const LaunchInfo &launch, CommBackend backend,
                                              std::chrono::seconds timeout);
} // namespace torchmod

namespace detail {

struct TorchOps
{
    size_t size = sizeof(TorchOps); ///< the module and the backend were built together
    decltype(&torchmod::readTensor) readTensor;
    decltype(&torchmod::readTensorInto) readTensorInto;
    decltype(&torchmod::sameAsStored) sameAsStored;
    decltype(&torchmod::computeStats) computeStats;
    decltype(&torchmod::measureCast) measureCast;
    decltype(&torchmod::castTensor) castTensor;
    decltype(&torchmod::connect) connect;
};

/** The module's one exported symbol: returns its table. */
constexpr const char *kTorchOpsEntry = "shardscope_torch_ops";

/** The table, the module loaded on first use (SHARDSCOPE_TORCH_MODULE names another file);
 *  an error saying why it cannot be loaded. */
Result<const TorchOps *> torchOps();

} // namespace detail

} // namespace shardscope
