// SPDX-License-Identifier: MIT
#include "shardscope/devices.h"

namespace shardscope {

bool builtWithCuda()
{
    return false;
}
std::vector<DeviceInfo> cudaDevices()
{
    return {};
}

} // namespace shardscope
