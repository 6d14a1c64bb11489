// SPDX-License-Identifier: MIT
// CPU load verification: the planned reads, per rank, into local shards; gathered and compared
// bit for bit with direct reads of the stored components.
#include "shardscope/verify.h"
#include "shapes.h"

#include "shardscope/devices.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <optional>
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

// Parameter checks travel between ranks as JSON; doubles as their bits, so they arrive exact.
nlohmann::json toJson(const ParamCheck &c, uint32_t param)
{
    const TensorHealth &h = c.health;
    auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
    return {{"param", param},
            {"name", c.name},
            {"dtype", c.dtype},
            {"shape", c.shape},
            {"outcome", int(c.outcome)},
            {"mismatches", c.mismatches},
            {"first", c.firstMismatch},
            {"round_trip", c.roundTrip},
            {"ranks", c.ranksHolding},
            {"fingerprint", c.fingerprint},
            {"sha256", c.sha256},
            {"note", c.note},
            {"h",
             {h.count, h.finite, h.nanCount, h.posInfCount, h.negInfCount, h.denormalCount,
              bits(h.min), bits(h.max), bits(h.mean), bits(h.std), bits(h.l2), h.fingerprint}},
            {"hist", h.histogram},
            {"device", h.device}};
}

ParamCheck fromJson(const nlohmann::json &j)
{
    ParamCheck c;
    auto real = [](const nlohmann::json &v) { return std::bit_cast<double>(v.get<uint64_t>()); };
    c.name = j.at("name");
    c.dtype = j.at("dtype");
    c.shape = j.at("shape").get<std::vector<int64_t>>();
    c.outcome = ParamCheck::Outcome(j.at("outcome").get<int>());
    c.mismatches = j.at("mismatches");
    c.firstMismatch = j.at("first");
    c.roundTrip = j.at("round_trip");
    c.ranksHolding = j.at("ranks");
    c.fingerprint = j.at("fingerprint");
    c.sha256 = j.at("sha256");
    c.note = j.at("note");
    const auto &h = j.at("h");
    TensorHealth &t = c.health;
    t.count = h.at(0);
    t.finite = h.at(1);
    t.nanCount = h.at(2);
    t.posInfCount = h.at(3);
    t.negInfCount = h.at(4);
    t.denormalCount = h.at(5);
    t.min = real(h.at(6));
    t.max = real(h.at(7));
    t.mean = real(h.at(8));
    t.std = real(h.at(9));
    t.l2 = real(h.at(10));
    t.fingerprint = h.at(11);
    t.histogram = j.at("hist").get<std::vector<int64_t>>();
    t.device = j.at("device");
    return c;
}

void tally(VerifyResult &r, const ParamCheck &c)
{
    switch (c.outcome) {
    case ParamCheck::Outcome::Identical:
        ++r.identical;
        break;
    case ParamCheck::Outcome::Mismatch:
        ++r.mismatched;
        break;
    case ParamCheck::Outcome::KeptInitial:
        ++r.keptInitial;
        break;
    case ParamCheck::Outcome::Skipped:
        return;
    }
    // A parameter with no source that something wrote into counts as kept-at-init gone wrong.
    if (c.outcome == ParamCheck::Outcome::Mismatch && c.note.starts_with("no source"))
        --r.mismatched, ++r.keptInitial;
    ++r.checked;
    r.roundTripFailures += !c.roundTrip;
}

} // namespace

Result<VerifyResult> verifyLoad(const CheckpointIndex &checkpoint, const Layout &layout,
                                const DiffResult &diff, const LoadPlan &plan,
                                const VerifyOptions &options)
{
    const auto t0 = std::chrono::steady_clock::now();
    VerifyResult result;
    result.world = plan.world;
    Communicator *comm = options.comm && options.comm->size() > 1 ? options.comm : nullptr;
    const int me = comm ? comm->rank() : -1; // -1: this process plays every rank
    const int procs = comm ? comm->size() : 1;
    if (comm) {
        if (plan.world != procs)
            return makeError(Error::Code::Format, "the plan has " + std::to_string(plan.world) +
                                                      " DP-shard ranks but the job has " +
                                                      std::to_string(procs) + " processes");
        result.processes = procs;
        result.backend = comm->backend();
    }

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
        if (me < 0 || r.rank == me)
            total += r.bytes;
    }

    // One rank's planned reads into its local shard (which starts as the initial pattern).
    auto fillShard = [&](const PerRank &pr, std::span<std::byte> local, DType dtype, int64_t row,
                         int64_t es) -> Status {
        const ParamShard &s = *pr.shard;
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
                return makeError(Error::Code::Internal, "read outside its shard").atKey(read->key);
            std::memcpy(local.data() + at, data->bytes.data(), data->bytes.size());
            result.bytesRead += data->bytes.size();
        }
        return Ok{};
    };

    uint64_t done = 0;
    TensorData full;               // the gathered parameter (bytes reused across parameters)
    std::vector<std::byte> direct; // the direct read, likewise
    std::vector<std::byte> sendBuf, recvBuf; // one parameter's all-gather, with a status byte
    std::optional<Error> failed;             // this rank's, until every rank has heard of it
    bool stop = false;
    uint32_t ordinal = 0; // parameters handled so far: which rank checks the next one
    std::vector<std::pair<uint32_t, ParamCheck>> checks;
    for (uint32_t pi = 0; pi < layout.params.size() && !stop; ++pi) {
        if (perParam[pi].empty())
            continue; // buffers and empty parameters: not in FSDP's buffers
        const LayoutParam &p = layout.params[pi];
        const int owner = comm ? int(ordinal++ % uint32_t(procs)) : me;
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
        // Gathered and direct copies, and across ranks the all-gather's buffers besides.
        const uint64_t need = uint64_t(numel * es) * (comm ? 4 : 2);
        if (options.maxMemory && need > options.maxMemory) {
            check.outcome = ParamCheck::Outcome::Skipped;
            check.note = "needs " + std::to_string(need) + " bytes, over --max-memory";
            if (owner == me)
                checks.emplace_back(pi, std::move(check));
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
        auto slice = [&](std::vector<std::byte> &buf, const ParamShard &s) {
            return std::span<std::byte>(buf.data() + s.flatBegin * es,
                                        size_t((s.flatEnd - s.flatBegin) * es));
        };

        // 1. Every rank's local shard, from exactly its planned reads. In one process: each
        //    rank's in turn, straight into its slice of the gathered tensor. Across processes:
        //    this rank's own, then an all-gather over c10d puts every rank's in place.
        if (!comm) {
            for (const PerRank &pr : perParam[pi]) {
                if (Status st = fillShard(pr, slice(gathered, *pr.shard), dtype, row, es); !st)
                    return st.error();
            }
        } else {
            size_t longest = 0;
            for (const PerRank &pr : perParam[pi])
                longest = std::max(longest, slice(gathered, *pr.shard).size());
            sendBuf.assign(longest + 1, std::byte{0});
            recvBuf.resize((longest + 1) * size_t(procs));
            for (const PerRank &pr : perParam[pi])
                if (pr.rank == me && !failed) {
                    const auto initial = slice(gathered, *pr.shard);
                    std::memcpy(sendBuf.data(), initial.data(), initial.size());
                    if (Status st =
                            fillShard(pr, std::span(sendBuf).first(initial.size()), dtype, row, es);
                        !st)
                        failed = st.error();
                }
            const bool cancel = options.progress && !options.progress(done, total);
            sendBuf[longest] = std::byte(failed ? 1 : cancel ? 2 : 0);
            if (Status st = comm->allgather(sendBuf, recvBuf); !st)
                return st.error(); // the job itself is broken: nothing more to agree on
            for (int r = 0; r < procs; ++r)
                if (const auto flag = recvBuf[size_t(r) * (longest + 1) + longest];
                    flag != std::byte{0}) {
                    stop = true;
                    result.cancelled = result.cancelled || flag == std::byte{2};
                }
            if (stop)
                break;
            for (const PerRank &pr : perParam[pi]) {
                const auto dest = slice(gathered, *pr.shard);
                std::memcpy(dest.data(), recvBuf.data() + size_t(pr.rank) * (longest + 1),
                            dest.size());
            }
        }
        for (const PerRank &pr : perParam[pi])
            if (me < 0 || pr.rank == me)
                for (const ShardRead *read : pr.reads)
                    done += uint64_t(product(read->sizes)) * uint64_t(es);
        if (owner != me) // another rank checks this one
            continue;

        // An independent direct read of the stored components (whole, not by the plan's boxes),
        // placed by the diff's rows: what the gathered shards must equal.
        const bool loadable = e && e->realLoadFills;
        if (loadable) {
            direct.resize(gathered.size()); // every row comes from a source
            const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
            for (const DiffSource &src : e->sources) {
                auto it = byKey.find(src.key);
                if (it == byKey.end()) {
                    failed = makeError(Error::Code::NotFound, "source is not in the checkpoint")
                                 .atKey(src.key);
                    break;
                }
                const auto whole = sourceRead(src, rows, 0, rows);
                if (!whole)
                    continue;
                auto data = readTensor(checkpoint, *it->second, readBox(*whole));
                if (!data) {
                    failed = data.error();
                    break;
                }
                const size_t at = size_t(whole->paramRow * row * es);
                std::memcpy(direct.data() + at, data->bytes.data(),
                            std::min(data->bytes.size(), direct.size() - at));
                result.bytesRead += data->bytes.size();
            }
            if (failed) {
                if (!comm)
                    return *failed;
                continue; // the other ranks hear of it at the next all-gather
            }
        }

        // 2. The round trip: split each rank's shard the way the save path does (§6.3: the flat
        //    slice intersected with each stored component's rows) and compare every piece with
        //    that component's stored bytes (from the direct read).
        if (loadable)
            for (const PerRank &pr : perParam[pi]) {
                const ParamShard &s = *pr.shard;
                const auto local = slice(gathered, s);
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
        }

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
        checks.emplace_back(pi, std::move(check));

        if (!comm && options.progress && !options.progress(done, total)) {
            result.cancelled = true;
            break;
        }
    }

    // Across processes every rank sends what it checked (or why it stopped); all merge the same.
    if (comm) {
        nlohmann::json mine = {{"bytes", result.bytesRead},
                               {"error", failed ? failed->toString() : std::string()},
                               {"checks", nlohmann::json::array()}};
        for (const auto &[pi, c] : checks)
            mine["checks"].push_back(toJson(c, pi));
        auto all = comm->allgatherText(mine.dump());
        if (!all)
            return all.error();
        checks.clear();
        result.bytesRead = 0;
        for (size_t r = 0; r < all->size(); ++r) {
            const auto j = nlohmann::json::parse((*all)[r], nullptr, false);
            if (j.is_discarded())
                return makeError(Error::Code::Internal,
                                 "rank " + std::to_string(r) + " sent unreadable results");
            if (const std::string err = j.value("error", std::string()); !err.empty())
                return makeError(Error::Code::Io, "rank " + std::to_string(r) + ": " + err);
            result.bytesRead += j.value("bytes", uint64_t(0));
            for (const auto &c : j.at("checks"))
                checks.emplace_back(c.at("param").get<uint32_t>(), fromJson(c));
        }
        std::sort(checks.begin(), checks.end(),
                  [](const auto &a, const auto &b) { return a.first < b.first; });
    }
    for (auto &[pi, c] : checks) {
        tally(result, c);
        result.params.push_back(std::move(c));
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

} // namespace shardscope
