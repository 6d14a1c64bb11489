// SPDX-License-Identifier: MIT
// A torch.save file (.pt/.bin) → CheckpointIndex entries.
#include "read/mappedfile.h"
#include "read/readers.h"
#include "read/torchsave.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

std::string joinPath(const std::vector<std::string> &path)
{
    std::string k;
    for (const std::string &p : path)
        k += (k.empty() ? "" : ".") + p;
    return k;
}

} // namespace

Status readTorchSave(const std::string &dataDir, const std::string &relativePath,
                     const std::string &keyPrefix, CheckpointIndex &index)
{
    const std::string path = (fs::path(dataDir) / relativePath).string();
    auto file = MappedFile::open(path);
    if (!file)
        return file.error();
    auto bytes = (*file)->bytes();
    auto payload = TorchSavePayload::open(bytes, 0);
    if (!payload)
        return payload.error().inFile(path);

    const uint32_t fileIndex = internFile(index, relativePath);
    Status st = Ok{};
    payload->flatten([&](const std::vector<std::string> &p, NodeId n) {
        if (!st)
            return;
        std::string key = keyPrefix + joinPath(p);
        if (payload->isTensor(n)) {
            auto spec = payload->tensorSpec(n);
            if (!spec) {
                st = spec.error().inFile(path).atKey(key);
                return;
            }
            TensorEntry t;
            t.path = KeyPath::fromParts(key, p);
            t.key = std::move(key);
            t.dtype = spec->dtype;
            t.dtypeName = spec->dtypeName;
            t.shape = spec->shape;
            t.strides = spec->strides;
            t.storageOffset = spec->storageOffset;
            t.chunkDims.assign(t.shape.size(), 0);
            t.chunkDims.insert(t.chunkDims.end(), t.shape.begin(), t.shape.end());
            Location loc;
            loc.file = fileIndex;
            loc.encoding = Encoding::RawStorage;
            loc.offset = spec->recordOffset;
            loc.length = spec->recordSize;
            t.chunks.push_back(loc);
            index.tensors.push_back(std::move(t));
        } else {
            ObjectEntry o;
            o.path = KeyPath::fromParts(key, p);
            o.key = std::move(key);
            o.value = std::make_shared<const PyValue>(payload->toValue(n));
            index.objects.push_back(std::move(o));
        }
    });
    return st;
}

} // namespace shardscope::detail
