// SPDX-License-Identifier: MIT
// DCP checkpoints whose tensors torch wrote as safetensors (docs/formats.md): a FileSystemWriter
// with serialization_format=SAFETENSORS, and HuggingFaceStorageWriter's shard files.
#include "read/mappedfile.h"
#include "read/readers.h"
#include "read/safetensors_magic.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace fs = std::filesystem;
using nlohmann::json;

namespace shardscope::detail {

namespace {

constexpr uint64_t kMaxHeader = 100'000'000; // safetensors' own bound

// DCP_SHARDING_INFO, as torch's writers put it in a block's __metadata__: the JSON text of
// {fqn: {"saved_offsets": [...]}}. Null when absent or not that shape.
json shardingInfo(const json &header)
{
    if (!header.contains("__metadata__") || !header["__metadata__"].is_object())
        return nullptr;
    const json &m = header["__metadata__"];
    if (!m.contains(kDcpShardingInfo) || !m[kDcpShardingInfo].is_string())
        return nullptr;
    json info = json::parse(m[kDcpShardingInfo].get<std::string>(), nullptr, false);
    return info.is_object() ? info : json(nullptr);
}

// The saved offsets of `key` in a block's sharding info, when they are a list of `ndim` sizes.
std::optional<std::vector<int64_t>> savedOffsets(const json &info, const std::string &key,
                                                 size_t ndim)
{
    if (!info.is_object() || !info.contains(key) || !info[key].is_object() ||
        !info[key].contains("saved_offsets") || !info[key]["saved_offsets"].is_array())
        return std::nullopt;
    const json &o = info[key]["saved_offsets"];
    if (o.size() != ndim)
        return std::nullopt;
    std::vector<int64_t> out;
    for (const json &v : o) {
        if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t(INT64_MAX) / 2)
            return std::nullopt;
        out.push_back(int64_t(v.get<uint64_t>()));
    }
    return out;
}

struct Block
{
    json header;
    uint64_t dataStart = 0; // file offset of the block's data buffer
    uint64_t dataLen = 0;
};

// The safetensors block at `offset` of a data file, or why there is none.
Result<Block> readBlock(const MappedFile &file, uint64_t offset)
{
    auto fail = [&](const std::string &msg, uint64_t at) {
        return makeError(Error::Code::Format, "safetensors block: " + msg)
            .inFile(file.path())
            .atOffset(at);
    };
    const auto all = file.bytes();
    if (offset > all.size() || !looksLikeSafetensors(all.subspan(offset)))
        return fail("no safetensors header here", offset);
    uint64_t n = 0;
    std::memcpy(&n, all.data() + offset, 8);
    if (n > kMaxHeader)
        return fail("declared header length " + std::to_string(n) + " exceeds the 100 MB bound",
                    offset);
    Block b;
    b.header = json::parse(all.begin() + long(offset + 8), all.begin() + long(offset + 8 + n),
                           nullptr, false);
    if (b.header.is_discarded() || !b.header.is_object())
        return fail("header is not a JSON object", offset + 8);
    b.dataStart = offset + 8 + n;
    b.dataLen = all.size() - b.dataStart;
    return b;
}

// Where a chunk's elements lie in a block: its entry must be the chunk (dtype, sizes, saved
// offsets when the block has them) and its data inside the buffer.
Result<Location> chunkInBlock(const Block &b, const TensorEntry &t, size_t c, Location loc)
{
    const std::string key = t.key.str();
    auto fail = [&](const std::string &msg) {
        return makeError(Error::Code::Format, msg).atKey(key).atOffset(b.dataStart);
    };
    if (!b.header.contains(key) || !b.header[key].is_object())
        return fail("the safetensors block holds no tensor of this name");
    const json &e = b.header[key];
    if (!e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2 || !e["data_offsets"][0].is_number_unsigned() ||
        !e["data_offsets"][1].is_number_unsigned())
        return fail("the safetensors entry lacks dtype/shape/data_offsets");
    std::vector<int64_t> shape;
    for (const json &d : e["shape"]) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
            return fail("the safetensors entry's shape holds a non-integer or negative size");
        shape.push_back(int64_t(d.get<uint64_t>()));
    }
    const std::string st = e["dtype"].get<std::string>();
    // safetensors counts float4 values, two to torch's float4_e2m1fn_x2 element.
    if (st == "F4" && !shape.empty() && shape.back() % 2 == 0)
        shape.back() /= 2;
    const bool dtypeOk =
        st == "F4" ? t.dtype == DType::Float4E2M1FNx2 : dtypeFromSafetensors(st) == t.dtype;
    const auto sizes = t.chunkSizes(c);
    if (!dtypeOk || !std::equal(shape.begin(), shape.end(), sizes.begin(), sizes.end()))
        return fail("the safetensors block stores it as " + st + " " + e["shape"].dump() +
                    ", not the " + t.dtypeName + " chunk the metadata describes");
    if (const json info = shardingInfo(b.header); !info.is_null()) {
        const auto at = savedOffsets(info, key, t.ndim());
        const auto want = t.chunkOffsets(c);
        if (!at || !std::equal(at->begin(), at->end(), want.begin(), want.end()))
            return fail("the safetensors block's DCP_SHARDING_INFO places it elsewhere than the "
                        "chunk the metadata describes");
    }
    const uint64_t lo = e["data_offsets"][0].get<uint64_t>(),
                   hi = e["data_offsets"][1].get<uint64_t>();
    if (lo > hi || hi > b.dataLen || hi - lo != loc.length)
        return fail("the safetensors entry's data_offsets [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + ") are not the chunk's " + std::to_string(loc.length) +
                    " bytes inside the block's " + std::to_string(b.dataLen) + "-byte buffer");
    loc.encoding = Encoding::RawStorage;
    loc.offset = b.dataStart + lo;
    loc.length = hi - lo;
    return loc;
}

uint64_t chunkBytes(const TensorEntry &t, size_t c)
{
    uint64_t n = uint64_t(elementSize(t.dtype));
    for (int64_t s : t.chunkSizes(c))
        if (s < 0 || __builtin_mul_overflow(n, uint64_t(s), &n))
            return UINT64_MAX;
    return n;
}

} // namespace

void resolveSafetensorsItems(CheckpointIndex &index)
{
    // A torch.save archive is never exactly its chunk's bytes long (its records and pickle come
    // with them); the safetensors writer records that length, at the block's start, for every
    // tensor of the file. Only those items are looked at: nothing is read for a plain DCP.
    std::map<std::pair<uint32_t, uint64_t>, std::vector<std::pair<uint32_t, uint32_t>>> blocks;
    for (size_t i = 0; i < index.tensors.size(); ++i) {
        const TensorEntry &t = index.tensors[i];
        if (elementSize(t.dtype) == 0)
            continue;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Location &l = t.chunks[c];
            if (l.encoding == Encoding::TorchSaveArchive && l.transforms == 0 &&
                l.file != kUnassigned && l.file < index.files.size() &&
                l.length == chunkBytes(t, c))
                blocks[{l.file, l.offset}].push_back({uint32_t(i), uint32_t(c)});
        }
    }
    size_t resolved = 0;
    for (const auto &[where, chunks] : blocks) {
        const std::string path = (fs::path(index.dataDir) / index.files[where.first]).string();
        auto file = MappedFile::open(path);
        if (!file)
            continue; // a missing or unreadable file is the integrity check's to name
        auto block = readBlock(**file, where.second);
        if (!block)
            continue; // not safetensors: left to the torch.save reader, which names what it is
        for (const auto &[i, c] : chunks) {
            TensorEntry &t = index.tensors[i];
            auto loc = chunkInBlock(*block, t, c, t.chunks[c]);
            if (!loc) {
                Problem p{t.key.str(), path, loc.error().offset,
                          loc.error().message + " (FileSystemWriter's SAFETENSORS format)"};
                p.effect = Problem::Effect::Unreadable;
                index.problems.push_back(std::move(p));
                continue;
            }
            t.chunks.edit()[c] = *loc;
            ++resolved;
        }
    }
    if (resolved == 0)
        return;
    index.info["dcp.serialization_format"] = "safetensors";
    // torch 2.11's FileSystemReader torch.loads every item and HuggingFaceStorageReader lists
    // only *.safetensors files: no reader of torch's loads these tensors
    // (tools/check_dcp_writers.py).
    index.problems.push_back(
        {"", (fs::path(index.dataDir) / ".metadata").string(), std::nullopt,
         std::to_string(resolved) +
             " tensor chunks are stored as safetensors (FileSystemWriter(serialization_format="
             "SerializationFormat.SAFETENSORS)): dcp.load's FileSystemReader reads each item with "
             "torch.load and raises on them, and HuggingFaceStorageReader reads only "
             "*.safetensors files",
         Problem::Effect::Note});
}

bool hasDcpShardingInfo(const std::string &path)
{
    auto file = MappedFile::open(path);
    if (!file)
        return false;
    auto block = readBlock(**file, 0);
    return block && !shardingInfo(block->header).is_null();
}

Status readHfStorage(const std::string &dir, std::vector<std::string> names, CheckpointIndex &index)
{
    // HuggingFaceStorageReader.read_metadata: every *.safetensors file of the directory, each
    // tensor a chunk at its DCP_SHARDING_INFO offsets (zeros without them), the global size
    // the furthest extent of any chunk, the dtype the first file's.
    std::sort(names.begin(), names.end());
    index.dataDir = dir;
    index.format = Format::Dcp;
    std::unordered_map<std::string, size_t> at;
    std::vector<TensorEntry> merged;
    for (const std::string &name : names) {
        CheckpointIndex part;
        part.dataDir = dir;
        part.files = index.files;
        if (Status st = readSafetensors(dir, name, part); !st)
            return st;
        index.files = part.files;
        const std::string path = (fs::path(dir) / name).string();
        json info = nullptr;
        if (auto it = part.info.find("safetensors." + std::string(kDcpShardingInfo));
            it != part.info.end()) {
            info = json::parse(it->second, nullptr, false);
            if (!info.is_object())
                return makeError(Error::Code::Format, "DCP_SHARDING_INFO is not a JSON object")
                    .inFile(path);
        }
        for (auto &[k, v] : part.info)
            if (k != "safetensors." + std::string(kDcpShardingInfo))
                index.info[k] = v;
        index.problems.insert(index.problems.end(), part.problems.begin(), part.problems.end());
        for (TensorEntry &t : part.tensors) {
            const std::string key = t.key.str();
            std::vector<int64_t> offsets(t.ndim(), 0);
            if (!info.is_null()) {
                // torch's reader raises KeyError on a tensor its file's info leaves out.
                auto o = savedOffsets(info, key, t.ndim());
                if (!o)
                    return makeError(Error::Code::Format,
                                     "DCP_SHARDING_INFO gives no saved_offsets of this tensor's "
                                     "rank")
                        .inFile(path)
                        .atKey(key);
                offsets = *o;
            }
            std::vector<int64_t> dims = offsets;
            dims.insert(dims.end(), t.shape.begin(), t.shape.end());
            auto found = at.find(key);
            if (found == at.end()) {
                at.emplace(key, merged.size());
                TensorEntry e = std::move(t);
                e.strides.clear(); // each chunk its own row-major block
                e.storageOffset = 0;
                std::vector<int64_t> size(e.ndim());
                for (size_t d = 0; d < size.size(); ++d)
                    size[d] = offsets[d] + e.shape[d];
                e.chunkDims = dims;
                e.shape = size;
                merged.push_back(std::move(e));
                continue;
            }
            TensorEntry &e = merged[found->second];
            if (e.ndim() != t.ndim())
                return makeError(Error::Code::Format,
                                 "shards store this tensor with different ranks")
                    .inFile(path)
                    .atKey(key);
            if (e.dtype != t.dtype || e.dtypeName != t.dtypeName)
                index.problems.push_back({key, path, std::nullopt,
                                          "this shard stores it as " + t.dtypeName + ", an " +
                                              "earlier shard as " + e.dtypeName +
                                              " (torch's reader takes the first and casts)",
                                          Problem::Effect::Note});
            e.chunks.push_back(t.chunks[0]);
            e.chunkDims.append(dims);
            auto shape = e.shape.edit();
            for (size_t d = 0; d < shape.size(); ++d)
                shape[d] = std::max(shape[d], offsets[d] + t.shape[d]);
        }
    }
    index.tensors.insert(index.tensors.end(), std::make_move_iterator(merged.begin()),
                         std::make_move_iterator(merged.end()));
    index.info["dcp.storage_reader"] = "HuggingFaceStorageReader";
    return Ok{};
}

} // namespace shardscope::detail
