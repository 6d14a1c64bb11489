// SPDX-License-Identifier: MIT
// CPU load verification: the planned reads, per rank, into local shards; gathered and compared
// bit for bit with direct reads of the stored components.
#include "shardscope/verify.h"
#include "shapes.h"

#include "shardscope/devices.h"

#include <chrono>
#include <cstring>
#include <span>
#include <unordered_map>

namespace shardscope {

using detail::product;

std::string_view outcomeName(ParamCheck::Outcome o)
{
    switch (o) {
    case ParamCheck::Outcome::Identical:
        return "bit_identical";
    case ParamCheck::Outcome::Mismatch:
        return "mismatch";
    case ParamCheck::Outcome::KeptInitial:
        return "kept_initial_values";
    case ParamCheck::Outcome::Skipped:
        return "skipped";
    }
    return "?";
}

namespace {

// A known, non-zero "initial value" pattern: a parameter no source fills must still hold it.
void fillInitial(std::vector<std::byte> &bytes, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) { // eight bytes a step: this runs over every parameter
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        std::memcpy(bytes.data() + i, &x, 8);
    }
    for (; i < bytes.size(); ++i)
        bytes[i] = std::byte(x >> (8 * (i & 7)));
}

std::string hex64(uint64_t v)
{
    static const char *d = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4)
        s[size_t(i)] = d[v & 15];
    return s;
}

} // namespace

Result<VerifyResult> verifyLoad(const CheckpointIndex &checkpoint, const Layout &layout,
                                const DiffResult &diff, const LoadPlan &plan,
                                const VerifyOptions &options)
{
    const auto t0 = std::chrono::steady_clock::now();
    VerifyResult result;
    result.world = plan.world;

    const bool gpu = options.useGpu && builtWithCuda() && !cudaDevices().empty();
    std::unordered_map<std::string, const TensorEntry *> byKey;
    for (const TensorEntry &t : checkpoint.tensors)
        byKey.emplace(t.key, &t);
    std::unordered_map<std::string, const DiffEntry *> entryOf;
    for (const DiffEntry &e : diff.entries)
        if (e.section == Section::Model)
            entryOf.emplace(e.param, &e);

    // Reads and shards per parameter, over all ranks (rank order = gather order).
    struct PerRank
    {
        int rank;
        const ParamShard *shard;
        std::vector<const ShardRead *> reads;
    };
    std::vector<std::vector<PerRank>> perParam(layout.params.size());
    uint64_t total = 0;
    for (const RankPlan &r : plan.ranks) {
        for (const ParamShard &s : r.shards)
            if (s.flatEnd > s.flatBegin)
                perParam[s.param].push_back({r.rank, &s, {}});
        for (const ShardRead &read : r.reads)
            for (PerRank &pr : perParam[read.param])
                if (pr.rank == r.rank)
                    pr.reads.push_back(&read);
        total += r.bytes;
    }

    uint64_t done = 0;
    TensorData full;               // the gathered parameter (bytes reused across parameters)
    std::vector<std::byte> direct; // the direct read, likewise
    for (uint32_t pi = 0; pi < layout.params.size(); ++pi) {
        if (perParam[pi].empty())
            continue; // buffers and empty parameters: not in FSDP's buffers
        const LayoutParam &p = layout.params[pi];
        ParamCheck check;
        check.name = p.name;
        check.shape = p.shape;
        check.ranksHolding = int(perParam[pi].size());
        const DiffEntry *e = entryOf.count(p.name) ? entryOf[p.name] : nullptr;
        // Bytes are compared in the stored dtype (a cast would change them by design).
        DType dtype = dtypeFromName(p.dtype).value_or(DType::Float32);
        if (e && !e->sources.empty())
            dtype = dtypeFromName(e->sources.front().dtype).value_or(dtype);
        check.dtype = std::string(dtypeName(dtype));
        const int64_t es = elementSize(dtype), numel = product(p.shape);
        const int64_t row = p.shape.size() > 1 ? product(p.shape, 1) : 1;
        const uint64_t need = uint64_t(numel * es) * 2;
        if (options.maxMemory && need > options.maxMemory) {
            check.outcome = ParamCheck::Outcome::Skipped;
            check.note = "needs " + std::to_string(need) + " bytes, over --max-memory";
            result.params.push_back(std::move(check));
            continue;
        }

        // Buffers live across parameters: their pages are faulted in once, not per parameter.
        std::vector<std::byte> &gathered = full.bytes;
        gathered.resize(size_t(numel * es));
        fillInitial(gathered, pi + 1);
        auto keptInitial = [&] { // regenerated, not kept: one buffer less per parameter
            std::vector<std::byte> initial(gathered.size());
            fillInitial(initial, pi + 1);
            return gathered == initial;
        };
        // An independent direct read of the stored components (whole, not by the plan's boxes),
        // placed by the diff's rows: what the gathered shards must equal.
        const bool loadable = e && e->realLoadFills;
        if (loadable) {
            direct.resize(gathered.size()); // every row comes from a source
            const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
            for (const DiffSource &src : e->sources) {
                auto it = byKey.find(src.key);
                if (it == byKey.end())
                    return makeError(Error::Code::NotFound, "source is not in the checkpoint")
                        .atKey(src.key);
                const auto whole = sourceRead(src, rows, 0, rows);
                if (!whole)
                    continue;
                auto data = readTensor(checkpoint, *it->second, readBox(*whole));
                if (!data)
                    return data.error();
                const size_t at = size_t(whole->paramRow * row * es);
                std::memcpy(direct.data() + at, data->bytes.data(),
                            std::min(data->bytes.size(), direct.size() - at));
                result.bytesRead += data->bytes.size();
            }
        }

        // 1. Every rank's local shard, from exactly its planned reads, into the gathered tensor
        //    (which starts from the known initial pattern).
        for (const PerRank &pr : perParam[pi]) {
            const ParamShard &s = *pr.shard;
            // The rank's local shard is its slice of the gathered buffer (an all-gather in place).
            const std::span<std::byte> local(gathered.data() + s.flatBegin * es,
                                             size_t((s.flatEnd - s.flatBegin) * es));
            for (const ShardRead *read : pr.reads) {
                auto it = byKey.find(read->key);
                if (it == byKey.end())
                    return makeError(Error::Code::NotFound, "planned key is not in the checkpoint")
                        .atKey(read->key);
                auto data = readTensor(checkpoint, *it->second, readBox(*read));
                if (!data)
                    return data.error();
                if (data->dtype != dtype)
                    return makeError(Error::Code::Unsupported,
                                     "sources of one parameter differ in dtype")
                        .atKey(read->key);
                const int64_t at = (read->paramRow * row - s.flatBegin) * es;
                if (at < 0 || size_t(at) + data->bytes.size() > local.size())
                    return makeError(Error::Code::Internal, "read outside its shard")
                        .atKey(read->key);
                std::memcpy(local.data() + at, data->bytes.data(), data->bytes.size());
                result.bytesRead += data->bytes.size();
                done += data->bytes.size();
            }
            // 2. The round trip: split this rank's shard the way the save path does (§6.3: the
            //    flat slice intersected with each stored component's rows) and compare every
            //    piece with that component's stored bytes (from the direct read).
            if (loadable)
                for (const DiffSource &src : e->sources) {
                    const auto piece = sourceRead(src, p.shape.empty() ? 1 : p.shape[0],
                                                  s.flatBegin / row, s.flatEnd / row);
                    if (!piece)
                        continue;
                    const int64_t from = piece->paramRow, to = from + piece->rows();
                    const size_t at = size_t((from * row - s.flatBegin) * es),
                                 len = size_t((to - from) * row * es);
                    if (std::memcmp(local.data() + at, direct.data() + from * row * es, len)) {
                        check.roundTrip = false;
                        check.note = "rank " + std::to_string(pr.rank) + ": the split piece for " +
                                     src.key + " differs from the stored bytes";
                    }
                }
        }

        // 3. The gathered tensor against the direct read, bit for bit.
        if (!loadable) {
            const bool kept = keptInitial();
            check.outcome = kept ? ParamCheck::Outcome::KeptInitial : ParamCheck::Outcome::Mismatch;
            check.note = kept ? "no source: the load leaves its initial values"
                              : "no source, yet something was written into it";
            ++result.keptInitial;
        } else {
            if (gathered != direct)
                for (int64_t i = 0; i < numel; ++i)
                    if (std::memcmp(direct.data() + i * es, gathered.data() + i * es, size_t(es))) {
                        if (check.firstMismatch < 0)
                            check.firstMismatch = i;
                        ++check.mismatches;
                    }
            check.outcome =
                check.mismatches ? ParamCheck::Outcome::Mismatch : ParamCheck::Outcome::Identical;
            (check.mismatches ? result.mismatched : result.identical) += 1;
        }
        ++result.checked;
        result.roundTripFailures += !check.roundTrip;

        full.dtype = dtype;
        full.shape = p.shape;
        auto health =
            options.useGpu && gpu ? computeHealth(full, ComputeDevice::Cuda) : computeHealth(full);
        if (!health && options.useGpu && gpu)
            health = computeHealth(full); // a device failure: the CPU path gives the same
        if (health) {
            check.health = std::move(*health);
            check.fingerprint = hex64(check.health.fingerprint);
        }
        if (options.hash)
            check.sha256 = sha256Hex(full);
        result.params.push_back(std::move(check));

        if (options.progress && !options.progress(done, total)) {
            result.cancelled = true;
            break;
        }
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

} // namespace shardscope
