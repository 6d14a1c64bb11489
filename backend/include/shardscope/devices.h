// SPDX-License-Identifier: MIT
#pragma once

#include <string>
#include <vector>

namespace shardscope {

struct DeviceInfo
{
    int index = 0;
    std::string name;
    unsigned long long memoryBytes = 0;
    int computeMajor = 0, computeMinor = 0;
};

/** Whether this build has its CUDA kernels compiled in. */
bool builtWithCuda();
/** CUDA devices visible to this process; empty without CUDA or without a GPU. */
std::vector<DeviceInfo> cudaDevices();

} // namespace shardscope
