// SPDX-License-Identifier: MIT
#include "shardscope/devices.h"

#include <cuda_runtime.h>

namespace shardscope {

bool builtWithCuda()
{
    return true;
}

std::vector<DeviceInfo> cudaDevices()
{
    std::vector<DeviceInfo> out;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // no driver or no device: a CPU machine, not an error
        return out;
    }
    for (int i = 0; i < n; ++i) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
            continue;
        out.push_back({i, p.name, (unsigned long long)p.totalGlobalMem, p.major, p.minor});
    }
    return out;
}

} // namespace shardscope
