// SPDX-License-Identifier: MIT
// Every field of the front door's requests and results as JSON values, for the wire.
#include "remote/codec.h"

#include "read/indexcache.h"
#include "read/indexcodec.h"
#include "read/mappedfile.h"
#include "remote/wire.h"
#include "shardscope/version.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <xxhash.h>

// std::optional and shared pointers to const values: null when absent.
namespace nlohmann {
template<typename T>
struct adl_serializer<std::optional<T>>
{
    static void to_json(json &j, const std::optional<T> &v)
    {
        if (v)
            j = *v;
        else
            j = nullptr;
    }
    static void from_json(const json &j, std::optional<T> &v)
    {
        if (j.is_null())
            v.reset();
        else
            v = j.get<T>();
    }
};
template<typename T>
struct adl_serializer<std::shared_ptr<const T>>
{
    static void to_json(json &j, const std::shared_ptr<const T> &v)
    {
        if (v)
            j = *v;
        else
            j = nullptr;
    }
    static void from_json(const json &j, std::shared_ptr<const T> &v)
    {
        if (j.is_null())
            v.reset();
        else
            v = std::make_shared<const T>(j.get<T>());
    }
};
} // namespace nlohmann

namespace shardscope {

using nlohmann::json;

// Enums as their numbers, checked: a value this build does not know is an error, never a
// value no switch expects.
#define SS_WIRE_ENUM(E, LAST)                                                                      \
    inline void to_json(json &j, E e)                                                              \
    {                                                                                              \
        j = int(e);                                                                                \
    }                                                                                              \
    inline void from_json(const json &j, E &e)                                                     \
    {                                                                                              \
        const int v = j.get<int>();                                                                \
        if (v < 0 || v > int(LAST))                                                                \
            throw std::out_of_range(#E " " + std::to_string(v) + " is unknown to this build");     \
        e = E(v);                                                                                  \
    }

SS_WIRE_ENUM(Format, Format::TorchSaveIndex)
SS_WIRE_ENUM(Problem::Effect, Problem::Effect::Unreadable)
SS_WIRE_ENUM(Error::Code, Error::Code::Internal)
SS_WIRE_ENUM(Strictness, Strictness::IgnoreAll)
SS_WIRE_ENUM(LoadStatus, LoadStatus::WrongSource)
SS_WIRE_ENUM(Section, Section::Other)
SS_WIRE_ENUM(LoadOutcome::Action, LoadOutcome::Action::Silent)
SS_WIRE_ENUM(KeyChange::Kind, KeyChange::Kind::DtypeChanged)
SS_WIRE_ENUM(TensorValueDiff::Verdict, TensorValueDiff::Verdict::NotCompared)
SS_WIRE_ENUM(ParamCheck::Outcome, ParamCheck::Outcome::NotChecked)
SS_WIRE_ENUM(Layout::LayerKeys, Layout::LayerKeys::PerLayer)
SS_WIRE_ENUM(PyValue::Kind, PyValue::Kind::Truncated)
SS_WIRE_ENUM(ReportFormat, ReportFormat::Json)
SS_WIRE_ENUM(RemoteLaunch::Launcher, RemoteLaunch::Launcher::Torchrun)

#define SS_WIRE(...) NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(__VA_ARGS__)

SS_WIRE(Error, code, message, file, key, offset)
SS_WIRE(Problem, key, file, offset, message, effect)
SS_WIRE(TorchVersion, major, minor)
SS_WIRE(TorchLimit, from, why)
SS_WIRE(TorchReadability, applies, from, limits)

// The diff. DiffOptions::sameValues is a function: the server's runs set it (they read files).
SS_WIRE(DiffOptions, disabledRules, strictness, strictLoad, includeOptimizer, measureCasts,
        failOnCast, checkInit, initStd, everyRule, previewRepair, threads)
SS_WIRE(DiffSource, key, shape, dtype, dim, begin, end, storedRow, index, entry)
SS_WIRE(CastLoss, maxAbs, maxRel, changed, count, worstIndex, worstValue)
SS_WIRE(DiffEntry, section, name, param, state, shape, dtype, status, realLoadFills, wrongSource,
        rules, sources, requestKeys, requestRows, unreadKeys, unreadEntries, reason, fix, narrowing,
        castLoss, looksInitial, tiedTo)
SS_WIRE(UnconsumedKey, key, shape, dtype, tensor, note, entry, redundant)
SS_WIRE(LoadOutcome, action, message, namedKeys, keptAtInit, optimizerKeptAtInit, loadedWrong,
        warnings)
SS_WIRE(RepairPreview, command, unsupported, changes, blockers, dataWritten)
SS_WIRE(DiffResult, checkpoint, against, format, torchReadable, options, entries, unconsumed,
        outcome, expectedModel, loadableModel, expectedOptimizer, loadableOptimizer, lossyCasts,
        repair)
SS_WIRE(KeyChange, kind, key, otherKey, rule, detail)
SS_WIRE(CheckpointDiff, first, second, firstTorch, secondTorch, same, changes)

// Values.
SS_WIRE(ValueSideStats, count, finite, mean, std, min, max)
SS_WIRE(TensorValueDiff, name, state, shape, dtypeA, dtypeB, keysA, keysB, verdict, why, unreadable,
        count, differing, outside, nonfinite, firstDiff, maxAbsAt, maxAbs, maxRel, meanAbs, rms,
        relL2, cosine, maxUlp, ulpDtype, histogram, a, b, device)
SS_WIRE(ValueDiffResult, first, second, layout, rtol, atol, tensors, processes, threads, bytesRead,
        maxMemory, cancelled, allowNotCompared)

// Verification and its plan.
SS_WIRE(TensorHealth, count, finite, nanCount, posInfCount, negInfCount, denormalCount, min, max,
        mean, std, l2, histogram, fingerprint, device)
SS_WIRE(ParamCheck, name, dtype, shape, outcome, mismatches, firstMismatch, roundTrip, ranksHolding,
        sourced, health, fingerprint, sha256, note)
SS_WIRE(VerifyResult, world, processes, threads, backend, checked, identical, mismatched,
        roundTripFailures, keptInitial, unreadable, wrongSource, notChecked, params, bytesRead,
        seconds, cancelled)
SS_WIRE(ParallelConfig, tp, pp, ep, etp, dpShard, firstStageLayers, lastStageLayers)
SS_WIRE(ShardPiece, localRow, paramRow, rows)
SS_WIRE(ParamShard, param, flatBegin, flatEnd, rowSize, tpRank, colBegin, colEnd, replica, pieces)
SS_WIRE(ShardRead, param, key, index, offsets, sizes, paramRow, localRow)
SS_WIRE(RankCoords, tp, dp, pp, etp, ep, edp)
SS_WIRE(RankPlan, rank, coords, shards, reads, unloadable, bytes)
SS_WIRE(BufferGroup, params, expert, unit, stage, ep, chunkFactor, size, offsets)
SS_WIRE(LoadPlan, world, parallel, expertDp, groups, ranks)
SS_WIRE(VerifyReport, checkpoint, layout, parallel, expertDp, maxMemory, result, plan)

// The repair. FixResult::index (the output's) stays on the server.
SS_WIRE(FixChangeCount, kind, count, examples)
SS_WIRE(FixUnused, key, kept, why)
SS_WIRE(FixResult, checkpoint, layout, output, format, options, alreadyLoads, written, changes,
        blockers, unused, copiedFromOutside, stillFails, bytesReferenced, bytesWritten,
        metadataBytes, filesLinked, filesSymlinked, filesCopied, filesWritten, before, after,
        diffCommand, verifyCommand, forTorch, sourceTorch, outputTorch)
SS_WIRE(ReportOutput, text, clean)

// Layouts (sent along with a request) and decoded objects.
SS_WIRE(FusedSection, name, size)
SS_WIRE(Fusion, rule, dim, sections, tpInterleaved, tpLocal)
SS_WIRE(LayoutParam, name, shape, dtype, tpDim, fusion, absorbs, expert, hasOptimizerState)
SS_WIRE(Layout, family, source, parallel, numExperts, expertsGlobal, mtpInner, transformerEngine,
        linearExtraState, optimizerStates, optimizerStep, ppLayerNames, ties, torchDistLayers,
        torchDistLayersWhy, params)
SS_WIRE(PyValue, kind, boolean, integer, real, text, name, ints, items, dict)

// Requests: their paths and options. The indexes and layouts they point at travel apart.
SS_WIRE(InspectRequest, path, filters, tensor, stats, hash, objects, initStd)
SS_WIRE(DiffRequest, checkpoint, layout, options, layoutCommand)
SS_WIRE(CheckpointDiffRequest, first, second, options)
SS_WIRE(ValueDiffRequest, first, second, layout, disabledRules, rtol, atol, includeOptimizer,
        maxMemory, threads, useGpu, allowNotCompared)
SS_WIRE(VerifyRequest, checkpoint, layout, dp, tp, pp, ep, etp, firstStageLayers, lastStageLayers,
        disabledRules, maxMemory, threads, hash, useGpu)
SS_WIRE(ReportContext, command, generatedAt)
SS_WIRE(ReportRequest, diff, against, values, format, context)
SS_WIRE(FixRequest, checkpoint, layout, output, options, copy, force, partial, commandLine,
        forTorch)
SS_WIRE(RemoteLaunch, launcher, nodes, ranks, partition, timeLimit, account, backend)
SS_WIRE(RemoteTensorDetails, health, healthError, sha256, bytes)

#undef SS_WIRE
#undef SS_WIRE_ENUM

} // namespace shardscope

namespace shardscope::detail::remote {

template<typename T>
json toJson(const T &value)
{
    return json(value);
}

template<typename T>
Result<T> fromJson(const json &j)
{
    try {
        return j.get<T>();
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format,
                         std::string("a message this build cannot read (") + e.what() + ")");
    }
}

#define SS_WIRE_TYPE(T)                                                                            \
    template json toJson<T>(const T &);                                                            \
    template Result<T> fromJson<T>(const json &);
SS_WIRE_TYPE(DiffResult)
SS_WIRE_TYPE(CheckpointDiff)
SS_WIRE_TYPE(ValueDiffResult)
SS_WIRE_TYPE(VerifyReport)
SS_WIRE_TYPE(FixResult)
SS_WIRE_TYPE(ReportOutput)
SS_WIRE_TYPE(Layout)
SS_WIRE_TYPE(PyValue)
SS_WIRE_TYPE(InspectRequest)
SS_WIRE_TYPE(DiffRequest)
SS_WIRE_TYPE(CheckpointDiffRequest)
SS_WIRE_TYPE(ValueDiffRequest)
SS_WIRE_TYPE(VerifyRequest)
SS_WIRE_TYPE(ReportRequest)
SS_WIRE_TYPE(FixRequest)
SS_WIRE_TYPE(RemoteLaunch)
SS_WIRE_TYPE(RemoteTensorDetails)
#undef SS_WIRE_TYPE

json errorToJson(const Error &e)
{
    return json(e);
}

Error errorFromJson(const json &j)
{
    try {
        return j.get<Error>();
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format,
                         std::string("an error this build cannot read (") + e.what() + ")");
    }
}

// ---------------------------------------------------------------- the index

namespace {

// The persistent index's file this index was read from or is being written to (its open says
// so in its info), and the bytes of one still being written; empty when there is none.
std::pair<std::string, std::shared_ptr<const HotVector<char>>>
cacheEntryOf(const CheckpointIndex &index)
{
    auto it = index.info.find("index_cache");
    if (it == index.info.end())
        return {};
    for (const std::string_view prefix : {"read from ", "writing to "})
        if (auto at = it->second.find(prefix); at != std::string::npos) {
            const std::string path = it->second.substr(at + prefix.size());
            return {path, prefix == "writing to " ? pendingIndexWrite(path) : nullptr};
        }
    return {};
}

} // namespace

IndexBlob indexBlob(const CheckpointIndex &index)
{
    json header = {{"format", index.format},        {"input_path", index.inputPath},
                   {"data_dir", index.dataDir},     {"file_sizes", index.fileSizes},
                   {"file_kinds", index.fileKinds}, {"info", index.info}};
    const std::string packed = toPack(header);
    IndexBlob blob;
    blob.header.resize(4);
    const uint32_t n = uint32_t(packed.size());
    std::memcpy(blob.header.data(), &n, 4); // little-endian, as the entry's own integers
    blob.header += packed;
    // A DCP checkpoint's persistent index already holds its entry: sent as it is (still in
    // memory while it is being written). The entry is named by the metadata's identity, so it
    // holds this very index (the client checks its checksum); the header carries every info
    // entry. What the open added after it (a torch_dist common.pt's keys, the integrity
    // checks' problems) is not in it: then the index is encoded here.
    const auto [path, pending] = cacheEntryOf(index);
    std::span<const uint8_t> bytes;
    std::shared_ptr<const void> keep;
    if (pending) {
        bytes = {reinterpret_cast<const uint8_t *>(pending->data()), pending->size()};
        keep = pending;
    } else if (!path.empty()) {
        if (auto file = MappedFile::open(path); file) { // pages read only when sent
            bytes = (*file)->bytes();
            keep = *file;
        }
    }
    const IndexEntryCounts want{index.files.size(), index.transformChains.size(),
                                index.problems.size(), index.tensors.size(), index.objects.size()};
    if (keep)
        if (auto counts = indexEntryCounts(bytes, path); counts && *counts == want) {
            blob.entry =
                std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size());
            blob.keep = keep;
            blob.entryPath = path;
        }
    if (!blob.keep) {
        IndexCacheKey key;
        key.build = std::string("shardscope ") + kVersion + " wire";
        key.directory = index.inputPath;
        // The info entries travel in the header; the entry names no files.
        auto encoded = std::make_shared<HotVector<char>>(encodeIndex(key, index, {}, {}));
        blob.entry = std::string_view(encoded->data(), encoded->size());
        blob.keep = encoded;
    }
    // The header without the persistent index's own note, which says how this open went.
    json same = header;
    same["info"].erase("index_cache");
    const std::string stable = toPack(same);
    char hex[40];
    std::snprintf(hex, sizeof hex, "%016llx-",
                  (unsigned long long)XXH3_64bits(stable.data(), stable.size()));
    blob.identity = hex + entryIdentity(blob.entry);
    return blob;
}

std::string entryIdentity(std::string_view entry)
{
    char hex[24];
    std::snprintf(hex, sizeof hex, "%016llx",
                  (unsigned long long)storedIndexChecksum(
                      std::span(reinterpret_cast<const uint8_t *>(entry.data()), entry.size())));
    return hex;
}

std::string encodeIndexBlob(const CheckpointIndex &index)
{
    const IndexBlob blob = indexBlob(index);
    return blob.header + std::string(blob.entry);
}

Result<std::pair<std::string_view, std::string_view>> splitIndexBlob(std::string_view bytes)
{
    uint32_t n = 0;
    if (bytes.size() < 4)
        return makeError(Error::Code::Format, "the index the server sent: cut short");
    std::memcpy(&n, bytes.data(), 4);
    if (n > bytes.size() - 4)
        return makeError(Error::Code::Format,
                         "the index the server sent: a header longer than the blob");
    return std::pair(bytes.substr(0, 4 + n), bytes.substr(4 + n));
}

Result<std::shared_ptr<const CheckpointIndex>>
decodeIndexBlob(std::string_view bytes, const std::string &origin, int threads)
{
    auto parts = splitIndexBlob(bytes);
    if (!parts)
        return parts.error().inFile(origin);
    // Copied out of the blob (no views): the blob goes when this returns.
    return decodeIndexBlob(parts->first, parts->second, origin, threads, false);
}

Result<std::shared_ptr<CheckpointIndex>>
decodeIndexEntry(std::string_view entry, const std::string &origin, int threads, bool view)
{
    auto index = std::make_shared<CheckpointIndex>();
    const std::span<const uint8_t> body(reinterpret_cast<const uint8_t *>(entry.data()),
                                        entry.size());
    if (auto s = decodeIndexBody(body, origin, *index, threads, view); !s)
        return s.error();
    return index;
}

Status applyIndexHeader(std::string_view headerBytes, CheckpointIndex &index,
                        const std::string &origin)
{
    auto bad = [&](const std::string &what) {
        return makeError(Error::Code::Format, "the index the server sent: " + what).inFile(origin);
    };
    if (headerBytes.size() < 4)
        return bad("cut short");
    auto header = fromPack(headerBytes.substr(4));
    if (!header)
        return bad(header.error().message);
    try {
        const json &h = *header;
        index.format = h.at("format").get<Format>();
        index.inputPath = h.at("input_path").get<std::string>();
        index.dataDir = h.at("data_dir").get<std::string>();
        index.fileSizes = h.at("file_sizes").get<std::vector<uint64_t>>();
        index.fileKinds = h.at("file_kinds").get<std::vector<std::string>>();
        // The header's, whole: an entry holds only those its open added.
        index.info = h.at("info").get<std::map<std::string, std::string>>();
    } catch (const std::exception &e) {
        return bad(e.what());
    }
    if (index.fileSizes.size() != index.files.size() ||
        index.fileKinds.size() != index.files.size())
        return bad("file sizes and kinds do not match its files");
    return Ok{};
}

Result<std::shared_ptr<const CheckpointIndex>> decodeIndexBlob(std::string_view headerBytes,
                                                               std::string_view entryBytes,
                                                               const std::string &origin,
                                                               int threads, bool view)
{
    auto index = decodeIndexEntry(entryBytes, origin, threads, view);
    if (!index)
        return index.error();
    if (auto s = applyIndexHeader(headerBytes, **index, origin); !s)
        return s.error();
    return std::shared_ptr<const CheckpointIndex>(std::move(*index));
}

// ---------------------------------------------------------------- inspect

namespace {

int64_t itemOf(const CheckpointIndex &index, const TensorEntry *t)
{
    return int64_t(t - index.tensors.data());
}

int64_t itemOf(const CheckpointIndex &index, const ObjectEntry *o)
{
    return int64_t(index.tensors.size()) + int64_t(o - index.objects.data());
}

} // namespace

json inspectToJson(const InspectResult &result)
{
    const CheckpointIndex &index = *result.index;
    json tensors = json::array();
    for (const InspectedTensor &t : result.tensors)
        tensors.push_back({{"item", itemOf(index, t.entry)},
                           {"health", t.health},
                           {"sha256", t.sha256},
                           {"looks_initial", t.looksInitial}});
    json objects = json::array();
    for (const InspectedObject &o : result.objects)
        objects.push_back({{"item", itemOf(index, o.entry)}, {"summary", o.summary}});
    return {{"tensors", std::move(tensors)},
            {"objects", std::move(objects)},
            {"problems", result.problems}};
}

Result<InspectResult> inspectFromJson(const json &j, std::shared_ptr<const CheckpointIndex> index)
{
    InspectResult r;
    r.index = std::move(index);
    const CheckpointIndex &ix = *r.index;
    try {
        for (const json &t : j.at("tensors")) {
            const uint64_t item = t.at("item").get<uint64_t>();
            if (item >= ix.tensors.size())
                return makeError(Error::Code::Format, "an inspected tensor outside the index");
            r.tensors.push_back(
                {&ix.tensors[item], t.at("health").get<std::optional<TensorHealth>>(),
                 t.at("sha256").get<std::string>(), t.at("looks_initial").get<std::string>()});
        }
        for (const json &o : j.at("objects")) {
            const uint64_t item = o.at("item").get<uint64_t>();
            if (item < ix.tensors.size() || item >= ix.itemCount())
                return makeError(Error::Code::Format, "an inspected object outside the index");
            r.objects.push_back(
                {&ix.objects[item - ix.tensors.size()], o.at("summary").get<std::string>()});
        }
        r.problems = j.at("problems").get<std::vector<Problem>>();
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format,
                         std::string("an inspect result this build cannot read (") + e.what() +
                             ")");
    }
    return r;
}

// ---------------------------------------------------------------- verify/1, read back

namespace {

double number(const json &j)
{
    return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>();
}

} // namespace

Result<VerifyReport> verifyFromSchema(const std::string &text)
{
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("schema", "") != "shardscope.verify/1")
        return makeError(Error::Code::Format, "the job's output is not shardscope.verify/1");
    VerifyReport report;
    try {
        report.checkpoint = j.at("checkpoint").get<std::string>();
        report.layout = j.at("layout").get<std::string>();
        const json &p = j.at("parallel");
        report.parallel.tp = p.at("tp").get<int>();
        report.parallel.dpShard = p.at("dp").get<int>();
        report.parallel.pp = p.at("pp").get<int>();
        report.parallel.ep = p.at("ep").get<int>();
        report.parallel.etp = p.at("etp").get<int>();
        report.expertDp = p.at("expert_dp").get<int>();
        VerifyResult &r = report.result;
        r.world = j.at("world").get<int>();
        r.processes = j.at("processes").get<int>();
        r.threads = j.at("threads").get<int>();
        r.backend = j.at("backend").get<std::string>();
        if (r.backend == "none")
            r.backend.clear();
        r.checked = j.at("checked").get<size_t>();
        r.identical = j.at("bit_identical").get<size_t>();
        r.mismatched = j.at("mismatched").get<size_t>();
        r.roundTripFailures = j.at("round_trip_failures").get<size_t>();
        r.keptInitial = j.at("kept_initial").get<size_t>();
        r.unreadable = j.at("unreadable").get<size_t>();
        r.wrongSource = j.at("wrong_source").get<size_t>();
        r.notChecked = j.at("not_checked").get<size_t>();
        r.bytesRead = j.at("bytes_read").get<uint64_t>();
        r.seconds = number(j.at("seconds"));
        r.cancelled = j.at("cancelled").get<bool>();
        for (const json &c : j.at("params")) {
            ParamCheck pc;
            pc.name = c.at("name").get<std::string>();
            pc.dtype = c.at("dtype").get<std::string>();
            pc.shape = c.at("shape").get<std::vector<int64_t>>();
            const std::string outcome = c.at("outcome").get<std::string>();
            bool known = false;
            for (int o = 0; o <= int(ParamCheck::Outcome::NotChecked) && !known; ++o)
                if (outcomeName(ParamCheck::Outcome(o)) == outcome) {
                    pc.outcome = ParamCheck::Outcome(o);
                    known = true;
                }
            if (!known)
                return makeError(Error::Code::Format,
                                 "a verify outcome '" + outcome + "' this build does not know");
            pc.mismatches = c.at("mismatches").get<uint64_t>();
            pc.firstMismatch = c.at("first_mismatch").get<int64_t>();
            pc.roundTrip = c.at("round_trip").get<bool>();
            pc.ranksHolding = c.at("ranks").get<int>();
            pc.fingerprint = c.at("fingerprint").get<std::string>();
            pc.sha256 = c.at("sha256").get<std::string>();
            pc.note = c.at("note").get<std::string>();
            TensorHealth &h = pc.health;
            h.device = c.at("device").get<std::string>();
            const json &s = c.at("stats");
            h.min = number(s.at("min"));
            h.max = number(s.at("max"));
            h.mean = number(s.at("mean"));
            h.std = number(s.at("std"));
            h.l2 = number(s.at("l2"));
            h.nanCount = s.at("nan").get<int64_t>();
            h.posInfCount = s.at("inf").get<int64_t>(); // the schema has them together
            h.denormalCount = s.at("denormal").get<int64_t>();
            h.histogram = s.at("histogram").get<std::vector<int64_t>>();
            r.params.push_back(std::move(pc));
        }
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format,
                         std::string("the job's shardscope.verify/1 does not read: ") + e.what());
    }
    return report;
}

} // namespace shardscope::detail::remote
