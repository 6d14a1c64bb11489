// SPDX-License-Identifier: MIT
// safetensors files and their index.json sets.
#include "common/problemtext.h"
#include "read/mappedfile.h"
#include "read/readers.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>

namespace fs = std::filesystem;
using nlohmann::json;

namespace shardscope::detail {

namespace {

constexpr uint64_t kMaxHeader = 100'000'000; // the reference reader's own bound

// Bits per element for dtypes that torch has no name for (so we can still check sizes).
int subByteBits(std::string_view st)
{
    if (st == "F4")
        return 4;
    if (st == "F6_E2M3" || st == "F6_E3M2")
        return 6;
    return 0;
}

} // namespace

Status readSafetensors(const std::string &dataDir, const std::string &relativePath,
                       CheckpointIndex &index)
{
    const std::string path = (fs::path(dataDir) / relativePath).string();
    auto file = MappedFile::open(path);
    if (!file)
        return file.error();
    auto bytes = (*file)->bytes();
    auto fail = [&](std::string msg, uint64_t at, const std::string &key = {}) {
        Error e = makeError(Error::Code::Format, "safetensors: " + std::move(msg)).inFile(path);
        e.atOffset(at);
        if (!key.empty())
            e.atKey(key);
        return e;
    };
    if (bytes.size() < 8)
        return fail("file of " + std::to_string(bytes.size()) + " bytes has no header", 0);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    if (n > kMaxHeader)
        return fail("declared header length " + std::to_string(n) + " exceeds the 100 MB bound", 0);
    if (n > bytes.size() - 8)
        return fail("declared header length " + std::to_string(n) + " runs past the end of the " +
                        std::to_string(bytes.size()) + "-byte file",
                    0);
    if (n < 2 || bytes[8] != '{')
        return fail("header is not a JSON object", 8);
    json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + long(n), nullptr, false);
    if (header.is_discarded() || !header.is_object())
        return fail("header is not valid JSON", 8);

    const uint64_t dataStart = 8 + n;
    const uint64_t dataLen = bytes.size() - dataStart;
    const uint32_t fileIndex = internFile(index, relativePath);
    struct Span
    {
        uint64_t begin, end;
        std::string key;
    };
    std::vector<Span> spans;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string &key = it.key();
        if (key == "__metadata__") {
            if (it->is_object())
                for (auto m = it->begin(); m != it->end(); ++m)
                    if (m->is_string())
                        index.info["safetensors." + m.key()] = m->get<std::string>();
            continue;
        }
        const json &e = *it;
        if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() ||
            !e.contains("shape") || !e["shape"].is_array() || !e.contains("data_offsets") ||
            !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
            return fail("entry lacks dtype/shape/data_offsets", 8, key);
        const std::string st = e["dtype"].get<std::string>();
        TensorEntry t;
        t.key = key;
        auto dt = dtypeFromSafetensors(st);
        t.dtype = dt.value_or(DType::Unknown);
        t.dtypeName = dt ? std::string(dtypeName(*dt)) : st;
        unsigned __int128 numel = 1;
        for (const json &d : e["shape"]) {
            if (!d.is_number_unsigned())
                return fail("shape holds a non-integer or negative size", 8, key);
            t.shape.push_back(int64_t(d.get<uint64_t>()));
            numel *= d.get<uint64_t>();
            if (numel > (unsigned __int128)(1) << 62)
                return fail("shape has an absurd element count", 8, key);
        }
        const json &o = e["data_offsets"];
        if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned())
            return fail("data_offsets are not non-negative integers", 8, key);
        const uint64_t b = o[0].get<uint64_t>(), en = o[1].get<uint64_t>();
        const int bits = dt ? elementSize(*dt) * 8 : subByteBits(st);
        if (bits == 0)
            return makeError(Error::Code::Unsupported, "safetensors: unknown dtype '" + st + "'")
                .inFile(path)
                .atKey(key);
        // A lying entry spoils that tensor, not the file: report it and keep reading the rest.
        if (b > en || en > dataLen) {
            index.problems.push_back({key, path, dataStart + std::min(b, dataLen),
                                      "data_offsets [" + std::to_string(b) + ", " +
                                          std::to_string(en) + ") lie outside the " +
                                          std::to_string(dataLen) + "-byte data buffer",
                                      Problem::Effect::Unreadable});
            continue;
        }
        if (numel * unsigned(bits) != (unsigned __int128)(en - b) * 8) {
            index.problems.push_back(
                {key, path, dataStart + b,
                 "shape and dtype need " + std::to_string(uint64_t(numel * unsigned(bits) / 8)) +
                     " bytes but data_offsets span " + std::to_string(en - b)});
            continue;
        }
        // "F4" counts float4 values; torch's float4_e2m1fn_x2 packs two in a byte, and
        // safetensors' safe_open hands it back with the last dimension halved.
        if (st == "F4" && !t.shape.empty() && t.shape.back() % 2 == 0) {
            t.dtype = DType::Float4E2M1FNx2;
            t.dtypeName = std::string(dtypeName(t.dtype));
            t.shape.edit().back() /= 2;
        }
        t.strides.assign(t.shape.size(), 1);
        for (size_t i = t.shape.size(); i-- > 1;)
            t.strides[i - 1] = t.strides[i] * std::max<int64_t>(t.shape[i], 1);
        t.chunkDims.assign(t.shape.size(), 0);
        t.chunkDims.insert(t.chunkDims.end(), t.shape.begin(), t.shape.end());
        Location loc;
        loc.file = fileIndex;
        loc.encoding = Encoding::RawStorage;
        loc.offset = dataStart + b;
        loc.length = en - b;
        t.chunks.push_back(loc);
        index.tensors.push_back(std::move(t));
        spans.push_back({b, en, key});
    }
    // The format requires the tensors to tile the buffer: holes or overlaps mean a lying header.
    std::sort(spans.begin(), spans.end(),
              [](const Span &x, const Span &y) { return x.begin < y.begin; });
    uint64_t expect = 0;
    for (const Span &s : spans) {
        if (s.begin != expect && !(s.begin == s.end && s.begin <= expect))
            index.problems.push_back({s.key, path, dataStart + s.begin,
                                      s.begin > expect ? "hole before this tensor's data"
                                                       : "data overlaps the previous tensor"});
        expect = std::max(expect, s.end);
    }
    if (expect != dataLen)
        index.problems.push_back(
            {"", path, dataStart + expect,
             std::to_string(dataLen - expect) + " trailing bytes after the last tensor"});
    return Ok{};
}

Status readSafetensorsIndex(const std::string &jsonPath, CheckpointIndex &index)
{
    auto text = readTextFile(jsonPath, 256u << 20);
    if (!text)
        return text.error();
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object())
        return makeError(Error::Code::Format, "not a safetensors index (no weight_map object)")
            .inFile(jsonPath);
    std::vector<std::string> shards;
    std::map<std::string, std::string> expected;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it->is_string())
            return makeError(Error::Code::Format, "weight_map value is not a file name")
                .inFile(jsonPath)
                .atKey(it.key());
        std::string f = it->get<std::string>();
        if (f.empty() || f.find("..") != std::string::npos || f[0] == '/')
            return makeError(Error::Code::Format, "shard name '" + f + "' leaves the directory")
                .inFile(jsonPath)
                .atKey(it.key());
        expected[it.key()] = f;
        if (std::find(shards.begin(), shards.end(), f) == shards.end())
            shards.push_back(f);
    }
    // A shard that is missing or cannot be read breaks only the keys the index puts in it, as a
    // missing DCP data file does: each is named unreadable, with the file and why.
    std::vector<std::string> broken;
    auto breakShard = [&](const std::string &s, const std::string &why,
                          std::optional<uint64_t> at = std::nullopt) {
        broken.push_back(s);
        for (const auto &[k, f] : expected)
            if (f == s) {
                Problem p{k, (fs::path(index.dataDir) / s).string(), at, why};
                p.effect = Problem::Effect::Unreadable;
                index.problems.push_back(std::move(p));
            }
        internFile(index, s);
    };
    index.format = std::all_of(shards.begin(), shards.end(),
                               [](const std::string &s) { return s.ends_with(".safetensors"); })
                       ? Format::SafetensorsIndex
                       : Format::TorchSaveIndex;
    for (const std::string &s : shards) {
        if (!fs::exists(fs::path(index.dataDir) / s)) {
            breakShard(s, "shard file is missing");
            continue;
        }
        const size_t tensorsBefore = index.tensors.size(), problemsBefore = index.problems.size();
        // transformers' pytorch_model.bin.index.json names torch.save shards the same way.
        Status st = s.ends_with(".safetensors") ? readSafetensors(index.dataDir, s, index)
                                                : readTorchSave(index.dataDir, s, "", index);
        if (!st) {
            index.tensors.resize(tensorsBefore);
            index.problems.resize(problemsBefore);
            Error e = st.error();
            breakShard(s, "shard file cannot be read: " + e.message, e.offset);
        }
    }
    // A set, not findTensor() per key: DeepSeek-V3's index lists 90,000 keys.
    std::unordered_set<std::string_view> read;
    read.reserve(index.tensors.size());
    for (const TensorEntry &t : index.tensors)
        read.insert(t.key);
    for (const auto &[k, f] : expected)
        if (!read.contains(k) && std::find(broken.begin(), broken.end(), f) == broken.end() &&
            fs::exists(fs::path(index.dataDir) / f))
            index.problems.push_back(
                {k, (fs::path(index.dataDir) / f).string(), {}, std::string(kAbsentFromShard)});
    return Ok{};
}

} // namespace shardscope::detail
