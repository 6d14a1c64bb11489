// SPDX-License-Identifier: MIT
// The backend's side of the torch module: loading it, and the public functions that forward to it.
#include "tensor/torchops.h"

#include <dlfcn.h>
#include <filesystem>
#include <string>
#include <vector>

namespace shardscope {

namespace detail {

// Beside the executable (an installed layout), else where this build put it. Loaded once and
// never unloaded: tensors and communicators it made live on.
Result<const TorchOps *> torchOps()
{
    static const Result<const TorchOps *> loaded = []() -> Result<const TorchOps *> {
        std::vector<std::string> candidates;
        if (const char *env = std::getenv("SHARDSCOPE_TORCH_MODULE"))
            candidates.emplace_back(env);
        std::error_code ec;
        const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (!ec)
            candidates.push_back((exe.parent_path() / "libshardscope_torchops.so").string());
        candidates.emplace_back(SHARDSCOPE_TORCH_MODULE_PATH);
        std::string why;
        for (const std::string &path : candidates) {
            if (!std::filesystem::exists(path, ec))
                continue;
            void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!handle) {
                why = ::dlerror();
                continue;
            }
            using Entry = const TorchOps *(*)();
            auto entry = reinterpret_cast<Entry>(::dlsym(handle, kTorchOpsEntry));
            const TorchOps *ops = entry ? entry() : nullptr;
            if (ops && ops->size == sizeof(TorchOps))
                return ops;
            why = path + (ops ? " was built with another backend" : " lacks its entry");
        }
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
