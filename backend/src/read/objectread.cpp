// SPDX-License-Identifier: MIT
#include "common/sha256.h"
#include "read/itemloader.h"
#include "read/torchsave.h"
#include "read/ziparchive.h"
#include "shardscope/tensor.h"

namespace shardscope {

using namespace detail;

namespace {

Result<PyValue> readObjectImpl(const CheckpointIndex &index, const ObjectEntry &entry)
{
    if (entry.value)
        return *entry.value;
    if (!entry.location)
        return makeError(Error::Code::NotFound, "object has no storage entry")
            .atKey(entry.key.str());
    FileCache files(index);
    auto item = loadItem(index, *entry.location, files, kMaxObjectInflated);
    if (!item)
        return item.error().atKey(entry.key.str());
    // The default planner torch.saves each object; converters may store raw bytes instead.
    if (!looksLikeZip(item->bytes)) {
        PyValue v;
        v.kind = PyValue::Kind::Bytes;
        v.text.assign(reinterpret_cast<const char *>(item->bytes.data()), item->bytes.size());
        return v;
    }
    auto payload = TorchSavePayload::open(item->bytes, item->base);
    if (!payload)
        return payload.error().inFile(item->path).atKey(entry.key.str());
    return payload->toValue(payload->root());
}

} // namespace

Result<PyValue> readObject(const CheckpointIndex &index, const ObjectEntry &entry)
{
    try {
        return readObjectImpl(index, entry);
    } catch (const std::exception &e) { // allocation: errors stay values at the boundary
        return makeError(Error::Code::Limit, e.what()).atKey(entry.key.str());
    }
}

std::string sha256Hex(std::span<const std::byte> bytes)
{
    detail::Sha256 sha;
    sha.update(bytes);
    return sha.hex();
}

std::string sha256Hex(const TensorData &data)
{
    return sha256Hex(std::span(data.bytes));
}

} // namespace shardscope
