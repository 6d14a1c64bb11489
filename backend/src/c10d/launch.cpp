// SPDX-License-Identifier: MIT
// What needs no torch of a job's collectives: the launcher's environment, and texts gathered over
// any communicator's byte allgather.
#include "common/envint.h"
#include "shardscope/distributed.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace shardscope {

using detail::envInt;

Result<std::vector<std::string>> Communicator::allgatherText(const std::string &text)
{
    // Lengths first, then the texts padded to the longest.
    const uint64_t mine = text.size();
    std::vector<uint64_t> lengths(static_cast<size_t>(size()));
    if (Status st = allgather(std::as_bytes(std::span(&mine, 1)),
                              std::as_writable_bytes(std::span(lengths)));
        !st)
        return st.error();
    uint64_t longest = 0;
    for (uint64_t l : lengths)
        longest = std::max(longest, l);
    std::vector<std::byte> in(longest), out(longest * lengths.size());
    std::memcpy(in.data(), text.data(), text.size());
    if (Status st = allgather(in, out); !st)
        return st.error();
    std::vector<std::string> texts;
    for (size_t r = 0; r < lengths.size(); ++r)
        texts.emplace_back(reinterpret_cast<const char *>(out.data()) + r * longest,
                           size_t(lengths[r]));
    return texts;
}

Result<std::optional<LaunchInfo>> launchFromEnvironment()
{
    LaunchInfo info;
    const bool torchrun = std::getenv("WORLD_SIZE") != nullptr;
    const bool slurm = !torchrun && std::getenv("SLURM_NTASKS") && std::getenv("SLURM_PROCID");
    if (!torchrun && !slurm)
        return std::optional<LaunchInfo>();
    info.launcher = torchrun ? "torchrun" : "srun";
    auto world = envInt(torchrun ? "WORLD_SIZE" : "SLURM_NTASKS", true);
    auto rank = envInt(torchrun ? "RANK" : "SLURM_PROCID", true);
    auto local = envInt(torchrun ? "LOCAL_RANK" : "SLURM_LOCALID", false);
    if (!world)
        return world.error();
    if (!rank)
        return rank.error();
    if (!local)
        return local.error();
    info.worldSize = *world;
    info.rank = *rank;
    info.localRank = *local;
    if (info.worldSize < 1 || info.rank >= info.worldSize)
        return makeError(Error::Code::Format, "rank " + std::to_string(info.rank) +
                                                  " is outside a world of " +
                                                  std::to_string(info.worldSize));
    if (info.worldSize == 1)
        return std::optional<LaunchInfo>(info);
    const char *addr = std::getenv("MASTER_ADDR");
    if (!addr || !*addr)
        return makeError(Error::Code::NotFound,
                         "environment variable MASTER_ADDR is not set (rank 0's host)");
    info.masterAddr = addr;
    auto port = envInt("MASTER_PORT", true);
    if (!port)
        return port.error();
    if (*port == 0 || *port > 65535)
        return makeError(Error::Code::Format,
                         "MASTER_PORT=" + std::to_string(*port) + " is not a TCP port");
    info.masterPort = *port;
    return std::optional<LaunchInfo>(info);
}

} // namespace shardscope
