// SPDX-License-Identifier: MIT
// The index types of shardscope/checkpoint.h: names, sizes and lookups. Reading lives beside:
// openCheckpoint() and checkIntegrity() in open.cpp, readObject() in objectread.cpp, KeyPath in
// keypath.cpp.
#include "shardscope/checkpoint.h"

namespace shardscope {

std::string_view formatName(Format f)
{
    switch (f) {
    case Format::Dcp:
        return "dcp";
    case Format::MegatronTorchDist:
        return "torch_dist";
    case Format::MegatronFsdpDtensor:
        return "fsdp_dtensor";
    case Format::MegatronLegacy:
        return "megatron_torch";
    case Format::TorchSave:
        return "torch_save";
    case Format::Safetensors:
        return "safetensors";
    case Format::SafetensorsIndex:
        return "safetensors_index";
    case Format::TorchSaveIndex:
        return "torch_save_index";
    }
    return "unknown";
}

int64_t TensorEntry::numel() const
{
    // Metadata may claim any shape: a product past int64 saturates rather than wrapping (it can
    // then never match what a file holds).
    int64_t n = 1;
    for (int64_t d : shape)
        if (__builtin_mul_overflow(n, d, &n))
            return INT64_MAX;
    return n;
}

const TensorEntry *CheckpointIndex::findTensor(std::string_view key) const
{
    for (const TensorEntry &t : tensors)
        if (t.key == key)
            return &t;
    return nullptr;
}

const ObjectEntry *CheckpointIndex::findObject(std::string_view key) const
{
    for (const ObjectEntry &o : objects)
        if (o.key == key)
            return &o;
    return nullptr;
}

uint64_t CheckpointIndex::chunkCount() const
{
    uint64_t n = 0;
    for (const TensorEntry &t : tensors)
        n += t.chunks.size();
    return n;
}

std::string Problem::toString() const
{
    Error e;
    e.file = file;
    e.key = key;
    e.offset = offset;
    e.message = message;
    return e.toString();
}

std::string_view effectName(Problem::Effect e)
{
    switch (e) {
    case Problem::Effect::Note:
        return "note";
    case Problem::Effect::Holes:
        return "holes";
    case Problem::Effect::Unreadable:
        return "unreadable";
    }
    return "?";
}

} // namespace shardscope
