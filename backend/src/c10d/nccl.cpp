// SPDX-License-Identifier: MIT
// Communicator over libtorch's c10d ProcessGroupNCCL (builds with CUDA and a CUDA torch only).
//
// Built as a module of its own (nccl.h says why) and loaded by communicator.cpp on demand.
//
// Compile-checked only: it builds and links against the pinned CUDA wheel, but no NCCL
// collective has run yet (the build machine has no GPU). Until a GPU run says otherwise, treat it
// as untested. Per docs/build-notes.md ("c10d"), NCCL refuses two ranks on one GPU, so
// a lent machine with one GPU can only run world size 1 on NCCL; multi-rank logic is tested with
// Gloo.
#include "c10d/nccl.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace shardscope {

namespace {

class NcclCommunicator final : public Communicator
{
public:
    NcclCommunicator(c10::intrusive_ptr<c10d::Store> store,
                     c10::intrusive_ptr<c10d::ProcessGroupNCCL> group, c10::DeviceIndex device,
                     int rank, int size)
        : m_store(std::move(store))
        , m_group(std::move(group))
        , m_device(device)
        , m_rank(rank)
        , m_size(size)
    {}
    ~NcclCommunicator() override
    {
        // Without shutdown() the group's destructor aborts its communicators and warns that
        // destroy_process_group() was not called.
        try {
            m_group->shutdown();
        } catch (const std::exception &) {
        }
    }
    int rank() const override { return m_rank; }
    int size() const override { return m_size; }
    std::string backend() const override { return "nccl"; }

    Status allgather(std::span<const std::byte> in, std::span<std::byte> out) override
    {
        if (out.size() != in.size() * size_t(m_size))
            return makeError(Error::Code::Internal, "allgather: output is not world × input");
        if (in.empty())
            return Ok{};
        try {
            c10::cuda::CUDAGuard guard(m_device);
            const auto host = at::TensorOptions().dtype(at::kByte);
            at::Tensor input =
                at::from_blob(const_cast<std::byte *>(in.data()), {int64_t(in.size())}, host)
                    .to(at::Device(at::kCUDA, m_device));
            at::Tensor output = at::empty({int64_t(out.size())}, input.options());
            m_group->_allgather_base(output, input)->wait();
            // wait() only makes the current stream wait for NCCL's: the device must finish
            // before the host reads.
            c10::cuda::getCurrentCUDAStream(m_device).synchronize();
            at::from_blob(out.data(), {int64_t(out.size())}, host).copy_(output);
        } catch (const std::exception &e) {
            return commError("allgather over nccl", e);
        }
        return Ok{};
    }

    Status barrier() override
    {
        try {
            c10::cuda::CUDAGuard guard(m_device);
            c10d::BarrierOptions options;
            options.device_ids = {m_device}; // else c10d guesses the device from the rank
            m_group->barrier(options)->wait();
            c10::cuda::getCurrentCUDAStream(m_device).synchronize();
        } catch (const std::exception &e) {
            return commError("barrier over nccl", e);
        }
        return Ok{};
    }

private:
    c10::intrusive_ptr<c10d::Store> m_store;
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> m_group;
    c10::DeviceIndex m_device;
    int m_rank, m_size;
};

} // namespace

Result<std::unique_ptr<Communicator>> connectNccl(const LaunchInfo &launch,
                                                  c10::intrusive_ptr<c10d::Store> store,
                                                  std::chrono::seconds timeout);

} // namespace shardscope

// The module's entry point (see nccl.h): C linkage, so the loader finds it by name.
extern "C" __attribute__((visibility("default"))) shardscope::ConnectNccl shardscope_nccl_entry()
{
    return &shardscope::connectNccl;
}

namespace shardscope {

Result<std::unique_ptr<Communicator>> connectNccl(const LaunchInfo &launch,
                                                  c10::intrusive_ptr<c10d::Store> store,
                                                  std::chrono::seconds timeout)
{
    const int devices = c10::cuda::device_count();
    if (devices < 1)
        return makeError(Error::Code::Unsupported, "no CUDA device for NCCL on rank " +
                                                       std::to_string(launch.rank) +
                                                       "; use --backend gloo");
    const auto device = c10::DeviceIndex(launch.localRank % devices);
    try {
        // NCCL binds each rank to the current device when its communicator is created.
        c10::cuda::set_device(device);
        auto options = c10d::ProcessGroupNCCL::Options::create();
        options->timeout = timeout;
        auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, launch.rank,
                                                                 launch.worldSize, options);
        return std::unique_ptr<Communicator>(
            new NcclCommunicator(store, group, device, launch.rank, launch.worldSize));
    } catch (const std::exception &e) {
        return commError("cannot start NCCL on cuda:" + std::to_string(device) + " as rank " +
                             std::to_string(launch.rank),
                         e);
    }
}

} // namespace shardscope
