// SPDX-License-Identifier: MIT
// What the server says of the host it runs on, and how it sizes a job there: a login node is
// shared (cgroup quotas of a few cores and gigabytes), so the CPUs it may use are those of its
// affinity and its cgroup's quota, not the machine's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardscope::detail::remote {

/** CPUs this process may run on: its affinity, under the cgroup's cpu quota. */
int usableCpus();
/** The cgroup's memory limit (v2 memory.max, v1 limit_in_bytes); nullopt when unlimited. */
std::optional<uint64_t> cgroupMemoryLimit();
/** Physical memory. */
uint64_t physicalMemory();
/** `name` found on PATH (an executable file), or empty. */
std::string findOnPath(const std::string &name);
/** The running program's path (/proc/self/exe). */
std::string selfExecutable();
std::string hostName();

} // namespace shardscope::detail::remote
