// SPDX-License-Identifier: MIT
#pragma once
// Private to the c10d sources: torch types may appear here, never in include/shardscope/.

#include "shardscope/distributed.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

namespace shardscope {

/** A c10d exception as one line (its first), after `what`. */
inline Error commError(const std::string &what, const std::exception &e)
{
    // c10d's messages run over several lines (with a C++ trace); the first says what happened.
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos)
        msg.resize(nl);
    return makeError(Error::Code::Io, what + ": " + msg);
}

/**
 * An NCCL process group on `store`, on GPU LOCAL_RANK % device count. Defined in nccl.cpp, which
 * is built as its own module (libshardscope_nccl.so, linked to libtorch_cuda) in builds with CUDA
 * and a CUDA torch (SHARDSCOPE_HAVE_NCCL) and loaded only when a job asks for NCCL: loading
 * libtorch_cuda and the CUDA libraries it pulls in costs every process ~0.25 s at start.
 */
using ConnectNccl = Result<std::unique_ptr<Communicator>> (*)(const LaunchInfo &launch,
                                                              c10::intrusive_ptr<c10d::Store> store,
                                                              std::chrono::seconds timeout);
/** The module's one exported symbol: returns its ConnectNccl. */
constexpr const char *kNcclEntry = "shardscope_nccl_entry";

} // namespace shardscope
