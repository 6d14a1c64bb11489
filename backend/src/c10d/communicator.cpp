// SPDX-License-Identifier: MIT
// Communicator over libtorch's c10d: a TCPStore, then a Gloo (or, see nccl.cpp, NCCL) process
// group. Part of the torch module (tensor/torchops.h).
#include "c10d/nccl.h"
#include "c10d/rollcall.h"
#include "common/envint.h"
#include "common/loadmodule.h"
#include "tensor/torchops.h"

#include "shardscope/devices.h"
#include "shardscope/distributed.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

namespace shardscope {

using detail::envInt;

namespace {

class GlooCommunicator final : public Communicator
{
public:
    GlooCommunicator(c10::intrusive_ptr<c10d::Store> store,
                     c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int size,
                     bool storeOnRankZero)
        : m_store(std::move(store))
        , m_group(std::move(group))
        , m_rank(rank)
        , m_size(size)
        , m_storeOnRankZero(storeOnRankZero)
    {}
    int rank() const override { return m_rank; }
    int size() const override { return m_size; }
    std::string backend() const override { return "gloo"; }

    Status allgather(std::span<const std::byte> in, std::span<std::byte> out) override
    {
        if (out.size() != in.size() * size_t(m_size))
            return makeError(Error::Code::Internal, "allgather: output is not world × input");
        try {
            const auto opts = at::TensorOptions().dtype(at::kByte);
            // Gloo reads and writes the tensors' memory: wrap ours, no copies.
            std::vector<at::Tensor> input{
                at::from_blob(const_cast<std::byte *>(in.data()), {int64_t(in.size())}, opts)};
            std::vector<std::vector<at::Tensor>> output(1);
            for (int r = 0; r < m_size; ++r)
                output[0].push_back(
                    at::from_blob(out.data() + size_t(r) * in.size(), {int64_t(in.size())}, opts));
            if (in.empty())
                return Ok{};
            m_group->allgather(output, input)->wait();
        } catch (const std::exception &e) {
            return failed("allgather over gloo", e);
        }
        return Ok{};
    }

    Status barrier() override
    {
        try {
            m_group->barrier()->wait();
        } catch (const std::exception &e) {
            return failed("barrier over gloo", e);
        }
        return Ok{};
    }

private:
    // The error names the ranks that are gone, when that is why (a roll call on the store).
    Error failed(const std::string &what, const std::exception &e)
    {
        Error error = commError(what, e);
        const std::string lost =
            detail::lostRanks(*m_store, m_rank, m_size, m_failures++, m_storeOnRankZero);
        if (!lost.empty())
            error.message = what + ": " + lost + "; this is rank " + std::to_string(m_rank) + " (" +
                            error.message.substr(what.size() + 2) + ")";
        return error;
    }

    c10::intrusive_ptr<c10d::Store> m_store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> m_group;
    int m_rank, m_size;
    bool m_storeOnRankZero;
    int m_failures = 0;
};

#if SHARDSCOPE_HAVE_NCCL
// The NCCL module: next to the executable (an installed layout), else where this build put it.
// SHARDSCOPE_NCCL_MODULE names another. Loaded once and never unloaded: its communicators live on.
Result<ConnectNccl> loadNccl()
{
    static Result<ConnectNccl> loaded = []() -> Result<ConnectNccl> {
        auto entry = detail::loadModuleEntry("SHARDSCOPE_NCCL_MODULE", "libshardscope_nccl.so",
                                             SHARDSCOPE_NCCL_MODULE_PATH, kNcclEntry);
        if (!entry)
            return makeError(
                Error::Code::Unsupported,
                "cannot load the NCCL module (libshardscope_nccl.so)" +
                    (entry.error().message.empty() ? std::string() : ": " + entry.error().message) +
                    "; use --backend gloo");
        return reinterpret_cast<ConnectNccl (*)()>(*entry)();
    }();
    return loaded;
}

// Each rank decides alone, so a job whose hosts differ (GPUs on some only) must name a backend.
bool ncclSuits()
{
    if (!builtWithCuda())
        return false;
    const size_t gpus = cudaDevices().size();
    // NCCL refuses two ranks on one GPU: a host with more ranks (torchrun's LOCAL_WORLD_SIZE)
    // than GPUs uses Gloo.
    auto local = envInt("LOCAL_WORLD_SIZE", false, 1);
    return gpus > 0 && local && size_t(*local) <= gpus && loadNccl().ok();
}
#endif

} // namespace

namespace torchmod {

Result<std::unique_ptr<Communicator>> connect(const LaunchInfo &launch, CommBackend backend,
                                              std::chrono::seconds timeout)
{
#if SHARDSCOPE_HAVE_NCCL
    const bool nccl = backend == CommBackend::Nccl || (backend == CommBackend::Auto && ncclSuits());
#else
    if (backend == CommBackend::Nccl)
        return makeError(Error::Code::Unsupported,
                         "this build has no NCCL communicator; use --backend gloo");
#endif
    // A peer gone (a rank killed) makes the next write to its socket raise SIGPIPE, which would
    // end this rank without a word; ignored, as Python (torch.distributed's usual host) ignores
    // it, the write fails and the job names the lost rank.
    std::signal(SIGPIPE, SIG_IGN);
    try {
        // Under torchrun the agent already serves a store on MASTER_PORT (as torch's own
        // env:// rendezvous does, join it as a client); otherwise rank 0 serves it.
        const char *agentStore = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
        const bool useAgent = agentStore && std::string(agentStore) == "True";
        c10d::TCPStoreOptions o;
        o.port = uint16_t(launch.masterPort);
        o.isServer = launch.rank == 0 && !useAgent;
        o.numWorkers = launch.worldSize;
        o.waitWorkers = !useAgent;
        o.timeout = timeout;
        const char *attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
        c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::PrefixStore>(
            "shardscope/" + std::string(attempt ? attempt : "0"),
            c10::make_intrusive<c10d::TCPStore>(launch.masterAddr, o));
#if SHARDSCOPE_HAVE_NCCL
        if (nccl) {
            auto connectNccl = loadNccl();
            if (!connectNccl)
                return connectNccl.error();
            return (*connectNccl)(launch, store, timeout);
        }
#endif
        auto options = c10d::ProcessGroupGloo::Options::create(timeout);
        // The device binds where this host reaches rank 0 from: loopback for a one-host job.
        const bool local = launch.masterAddr == "127.0.0.1" || launch.masterAddr == "localhost";
        options->devices.push_back(
            local ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                  : c10d::ProcessGroupGloo::createDefaultDevice());
        options->threads = 1;
        auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, launch.rank,
                                                                 launch.worldSize, options);
        return std::unique_ptr<Communicator>(
            new GlooCommunicator(store, group, launch.rank, launch.worldSize, !useAgent));
    } catch (const std::exception &e) {
        return commError("cannot join the job at " + launch.masterAddr + ":" +
                             std::to_string(launch.masterPort) + " as rank " +
                             std::to_string(launch.rank),
                         e);
    }
}

} // namespace torchmod

} // namespace shardscope
