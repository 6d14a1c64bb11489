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
Error commError(const std::string &what, const std::exception &e);

/**
 * An NCCL process group on `store`, on GPU LOCAL_RANK % device count. Only in builds with CUDA and
 * a CUDA torch (SHARDSCOPE_HAVE_NCCL); defined in nccl.cpp.
 */
Result<std::unique_ptr<Communicator>> connectNccl(const LaunchInfo &launch,
                                                  c10::intrusive_ptr<c10d::Store> store,
                                                  std::chrono::seconds timeout);

} // namespace shardscope
