// SPDX-License-Identifier: MIT
// Which torch reads a DCP .metadata. The table below was read from each release's wheel
// (torch/distributed/checkpoint/metadata.py and filesystem.py, torch/_C/__init__.pyi,
// torch/include/c10/core/ScalarType.h), 2.4.0 to 2.15.0; tools/check_torch_compat.py holds it
// to what the pinned and the newest torch actually unpickle and load.
#include "shardscope/torchcompat.h"

#include <algorithm>
#include <charconv>

namespace shardscope {

namespace {

// Every class a torch-written .metadata names (Metadata, TensorStorageMetadata,
// TensorProperties, ChunkStorageMetadata, BytesStorageMetadata, MetadataIndex, StorageMeta,
// _StorageInfo, _MEM_FORMAT_ENCODING) exists in every checked release, and fields a release does
// not know (StorageMeta.modules from 2.7, Metadata.version from 2.9, _StorageInfo's
// transform_descriptors) only land in the object's __dict__: dataclasses without __setstate__
// take any. What does differ:
//  - TensorProperties.__setstate__ unpacks its state tuple: exactly 5 fields in 2.4–2.14; 5 or 6
//    (strides, which 2.15's writer always adds) from 2.15;
//  - dtypes are globals (torch.float8_e8m0fnu): a release without one cannot unpickle it;
//  - an item written through transforms (zstd) is undone only by releases that have
//    transform_descriptors (2.7 on); older ones hand the compressed bytes to torch.load.
struct NewDtype
{
    std::string_view name;
    TorchVersion from;
};
constexpr NewDtype kNewDtypes[] = {
    {"int1", {2, 6}},        {"int2", {2, 6}},           {"int3", {2, 6}},
    {"int4", {2, 6}},        {"int5", {2, 6}},           {"int6", {2, 6}},
    {"int7", {2, 6}},        {"float8_e8m0fnu", {2, 7}}, {"float4_e2m1fn_x2", {2, 8}},
    {"bcomplex32", {2, 14}},
};
// torch 2.4's dtypes (every one is still in 2.15).
constexpr std::string_view kDtypes24[] = {
    "bfloat16",    "bits16",          "bits1x8",       "bits2x4",
    "bits4x2",     "bits8",           "bool",          "cdouble",
    "cfloat",      "chalf",           "complex128",    "complex32",
    "complex64",   "double",          "float",         "float16",
    "float32",     "float64",         "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "half",          "int",
    "int16",       "int32",           "int64",         "int8",
    "long",        "qint32",          "qint8",         "quint2x4",
    "quint4x2",    "quint8",          "short",         "uint1",
    "uint2",       "uint3",           "uint4",         "uint5",
    "uint6",       "uint7",           "uint16",        "uint32",
    "uint64",      "uint8",
};
constexpr TorchVersion kTransformsFrom{2, 7};
constexpr TorchVersion kStridesFrom{2, 15};

bool dcpBased(Format f)
{
    return f == Format::Dcp || f == Format::MegatronFsdpDtensor || f == Format::MegatronTorchDist;
}

std::string through(TorchVersion v)
{
    // The release before v among the checked ones (2.x lines only).
    return TorchVersion{v.major, v.minor - 1}.text();
}

void dataLimits(const CheckpointIndex &index, std::vector<TorchLimit> &out)
{
    std::vector<std::string_view> seen;
    for (const TensorEntry &t : index.tensors) {
        const std::string_view name = t.dtypeName;
        if (std::find(seen.begin(), seen.end(), name) != seen.end())
            continue;
        seen.push_back(name);
        if (std::find(std::begin(kDtypes24), std::end(kDtypes24), name) != std::end(kDtypes24))
            continue;
        const auto added = std::find_if(std::begin(kNewDtypes), std::end(kNewDtypes),
                                        [&](const NewDtype &d) { return d.name == name; });
        if (added != std::end(kNewDtypes))
            out.push_back({added->from, "dtype torch." + std::string(name) + " (" + t.key.str() +
                                            "): torch " + kOldestTorchChecked.text() + "–" +
                                            through(added->from) +
                                            " has no such global and cannot unpickle it"});
        else
            out.push_back({std::nullopt, "dtype torch." + std::string(name) + " (" + t.key.str() +
                                             "): in no torch " + kOldestTorchChecked.text() + "–" +
                                             kNewestTorchChecked.text()});
    }
    // Checked with 2.11 and 2.15 (tools/check_dcp_writers.py): their FileSystemReader hands each
    // safetensors block's item to torch.load, which raises; the metadata unpickles, the load does
    // not.
    if (index.info.count("dcp.serialization_format"))
        out.push_back({std::nullopt, "tensors stored as safetensors blocks "
                                     "(FileSystemWriter(serialization_format=SAFETENSORS)): "
                                     "FileSystemReader hands each item to torch.load, which "
                                     "raises"});
    if (index.transformChains.size() > 1) {
        std::string chain;
        for (const std::string &d : index.transformChains[1])
            chain += (chain.empty() ? "" : ", ") + d;
        out.push_back(
            {kTransformsFrom, "items stored through transforms (" + chain + "): torch " +
                                  kOldestTorchChecked.text() + "–" + through(kTransformsFrom) +
                                  " ignore transform_descriptors and hand the stored bytes to "
                                  "torch.load"});
    }
}

void propertyLimits(const CheckpointIndex &index, std::vector<TorchLimit> &out)
{
    const auto it = index.info.find("tensor_properties");
    if (it == index.info.end())
        return;
    std::string_view forms = it->second;
    while (!forms.empty()) {
        const size_t comma = forms.find(", ");
        const std::string_view form = forms.substr(0, comma);
        forms = comma == std::string_view::npos ? std::string_view() : forms.substr(comma + 2);
        if (form == "5 fields")
            continue;
        if (form == "6 fields")
            out.push_back(
                {kStridesFrom, "TensorProperties pickled with 6 fields (strides, as torch " +
                                   kStridesFrom.text() + " writes it): torch " +
                                   kOldestTorchChecked.text() + "–" + through(kStridesFrom) +
                                   " raise ValueError: too many values to unpack (expected 5)"});
        else
            out.push_back({std::nullopt,
                           "TensorProperties pickled as " + std::string(form) +
                               ": the __setstate__ of torch " + kOldestTorchChecked.text() + "–" +
                               kNewestTorchChecked.text() + " takes a tuple of 5 (or, from " +
                               kStridesFrom.text() + ", 6) fields"});
    }
}

TorchReadability combine(std::vector<TorchLimit> limits)
{
    TorchReadability r;
    r.applies = true;
    r.from = kOldestTorchChecked;
    for (const TorchLimit &l : limits)
        if (!l.from)
            r.from.reset();
        else if (r.from && *l.from > *r.from)
            r.from = l.from;
    // The strictest first: nothing reads it, then the latest release.
    std::stable_sort(limits.begin(), limits.end(), [](const TorchLimit &a, const TorchLimit &b) {
        return !a.from ? bool(b.from) : b.from && *a.from > *b.from;
    });
    r.limits = std::move(limits);
    return r;
}

} // namespace

std::optional<TorchVersion> parseTorchVersion(std::string_view s)
{
    if (s.starts_with('v'))
        s.remove_prefix(1);
    TorchVersion v;
    const char *end = s.data() + s.size();
    auto a = std::from_chars(s.data(), end, v.major);
    if (a.ec != std::errc() || a.ptr == end || *a.ptr != '.')
        return std::nullopt;
    auto b = std::from_chars(a.ptr + 1, end, v.minor);
    if (b.ec != std::errc() || b.ptr == a.ptr + 1)
        return std::nullopt;
    if (b.ptr != end) { // a patch release: digits after a dot
        int patch = 0;
        auto c = *b.ptr == '.' ? std::from_chars(b.ptr + 1, end, patch)
                               : std::from_chars_result{b.ptr, std::errc::invalid_argument};
        if (c.ec != std::errc() || c.ptr != end)
            return std::nullopt;
    }
    return v;
}

std::string TorchReadability::text() const
{
    if (!applies)
        return {};
    if (!from)
        return "no torch " + kOldestTorchChecked.text() + "–" + kNewestTorchChecked.text();
    return "torch " + from->text() + " and later";
}

std::string TorchReadability::explained() const
{
    if (!applies)
        return {};
    std::string s = text();
    for (size_t i = 0; i < limits.size(); ++i)
        s += (i ? "; " : " (") + limits[i].why;
    return limits.empty() ? s + " (checked " + kOldestTorchChecked.text() + "–" +
                                kNewestTorchChecked.text() + ")"
                          : s + ")";
}

TorchReadability torchReadability(const CheckpointIndex &index)
{
    // Hugging Face-format shards: HuggingFaceStorageReader reads no .metadata.
    if (!dcpBased(index.format) || index.info.count("dcp.storage_reader"))
        return {};
    std::vector<TorchLimit> limits;
    propertyLimits(index, limits);
    dataLimits(index, limits);
    return combine(std::move(limits));
}

TorchReadability torchReadabilityRewritten(const CheckpointIndex &index)
{
    if (!dcpBased(index.format) || index.info.count("dcp.storage_reader"))
        return {};
    std::vector<TorchLimit> limits;
    dataLimits(index, limits);
    return combine(std::move(limits));
}

} // namespace shardscope
