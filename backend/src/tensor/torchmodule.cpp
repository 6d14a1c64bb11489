// SPDX-License-Identifier: MIT
// The torch module's entry (tensor/torchops.h).
#include "tensor/torchops.h"

namespace {

const shardscope::detail::TorchOps kOps = {
    sizeof(shardscope::detail::TorchOps), shardscope::torchmod::readTensor,
    shardscope::torchmod::readTensorInto, shardscope::torchmod::sameAsStored,
    shardscope::torchmod::computeStats,   shardscope::torchmod::measureCast,
    shardscope::torchmod::castTensor,     shardscope::torchmod::connect,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const shardscope::detail::TorchOps *
shardscope_torch_ops()
{
    return &kOps;
}
