// SPDX-License-Identifier: MIT
// The backend's side of the torch module: loading it, and the public functions that forward to it.
#include "tensor/torchops.h"

#include "common/loadmodule.h"

#include <string>

namespace shardscope {

namespace detail {

// Beside the executable (an installed layout), else where this build put it. Loaded once and
// never unloaded: tensors and communicators it made live on.
Result<const TorchOps *> torchOps()
{
    static const Result<const TorchOps *> loaded = []() -> Result<const TorchOps *> {
        auto entry = loadModuleEntry("SHARDSCOPE_TORCH_MODULE", "libshardscope_torchops.so",
                                     SHARDSCOPE_TORCH_MODULE_PATH, kTorchOpsEntry);
        const TorchOps *ops = entry ? reinterpret_cast<const TorchOps *(*)()>(*entry)() : nullptr;
        if (ops && ops->size == sizeof(TorchOps))
            return ops;
        const std::string why = !entry ? entry.error().message
                                       : "libshardscope_torchops.so was built with another backend";
        return makeError(Error::Code::Unsupported,
                         "cannot load libtorch (libshardscope_torchops.so)" +
                             (why.empty() ? std::string(": not found") : ": " + why));
    }();
    return loaded;
}

} // namespace detail

int64_t TensorData::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

Result<TensorData> readTensor(const CheckpointIndex &index, const TensorEntry &entry,
                              const Box &box)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->readTensor(index, entry, box);
}

Status readTensorInto(const CheckpointIndex &index, const TensorEntry &entry, const Box &box,
                      std::span<std::byte> out)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->readTensorInto(index, entry, box, out);
}

Result<bool> sameAsStored(const CheckpointIndex &index, const TensorEntry &entry, const Box &box,
                          std::span<const std::byte> expected)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->sameAsStored(index, entry, box, expected);
}

Result<TensorStats> computeStats(const TensorData &data)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->computeStats(data);
}

Result<CastLoss> measureCast(const TensorData &stored, DType to)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->measureCast(stored, to);
}

Result<TensorData> castTensor(const TensorData &data, DType to)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->castTensor(data, to);
}

Result<std::unique_ptr<Communicator>> connect(const LaunchInfo &launch, CommBackend backend,
                                              std::chrono::seconds timeout)
{
    auto ops = detail::torchOps();
    if (!ops)
        return ops.error();
    return (*ops)->connect(launch, backend, timeout);
}

} // namespace shardscope
