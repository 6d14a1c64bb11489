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

// "a collections.Counter(…) call", "a set": what a value kept as it is was built as.
std::string valueKind(const TorchSavePayload &payload, NodeId n)
{
    const PickleArena &a = payload.arena();
    switch (a.kind(n)) {
    case NodeKind::Object: {
        const std::string cls = a.className(n);
        return cls.empty() ? std::string("a call") : "a " + cls + "(…) call";
    }
    case NodeKind::PersId:
        return "a storage";
    case NodeKind::Tuple:
        return "a tuple";
    case NodeKind::List:
        return "a list";
    case NodeKind::Dict:
        return "a dict";
    case NodeKind::Set:
    case NodeKind::FrozenSet:
        return "a set";
    default:
        return "a plain value";
    }
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
            // Never "healthy, 0 tensors" over data that is there: tensors inside a value kept
            // as it is, or a top level that is no container, are named.
            const PickleArena &a = payload->arena();
            const std::string what = p.empty() ? "the top-level object" : "this value";
            if (auto hidden = payload->hiddenTensor(n))
                index.problems.push_back(
                    {key, path, a.offsetOf(hidden->at),
                     hidden->at == n
                         ? what + " is " + hidden->what +
                               ", a form ShardScope does not read: torch.load returns a tensor "
                               "here that is not listed"
                         : what + " (" + valueKind(*payload, n) + ") holds " + hidden->what +
                               " inside a form ShardScope does not interpret: torch.load "
                               "returns tensors here that are not listed",
                     Problem::Effect::Note});
            else if (p.empty() && a.kind(n) == NodeKind::Object)
                index.problems.push_back({key, path, a.offsetOf(n),
                                          "the top-level object is " + valueKind(*payload, n) +
                                              ", which ShardScope does not interpret",
                                          Problem::Effect::Note});
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
