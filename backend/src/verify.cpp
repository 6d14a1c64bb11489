// SPDX-License-Identifier: MIT
// CPU load verification: the planned reads, per rank, into local shards; gathered and compared
// bit for bit with direct reads of the stored components.
#include "shardscope/verify.h"
#include "healthstream.h"
#include "kernels/healthcore.h"
#include "sha256.h"
#include "shapes.h"

#include "shardscope/devices.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
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
// Byte k of the pattern is byte k % 8 of word k / 8, so any window of it can be made alone.
void fillInitial(std::span<std::byte> bytes, uint64_t seed, uint64_t offset = 0)
{
    // Word w is ((w + 1)·φ) ^ key: an addition a word, which vectorises (this runs over every
    // byte verified).
    constexpr uint64_t kPhi = 0x9E3779B97F4A7C15ull;
    const uint64_t key = kernels::splitmix64(seed) | 1;
    auto word = [key](uint64_t w) { return ((w + 1) * kPhi) ^ key; };
    size_t i = 0;
    for (; i < bytes.size() && (offset + i) % 8; ++i) // to a word boundary
        bytes[i] = std::byte(word((offset + i) / 8) >> (8 * ((offset + i) % 8)));
    const size_t words = (bytes.size() - i) / 8;
    uint64_t x = ((offset + i) / 8 + 1) * kPhi;
    std::byte *out = bytes.data() + i;
    for (size_t k = 0; k < words; ++k, x += kPhi) {
        const uint64_t v = x ^ key;
        std::memcpy(out + k * 8, &v, 8);
    }
    for (i += words * 8; i < bytes.size(); ++i)
        bytes[i] = std::byte(word((offset + i) / 8) >> (8 * ((offset + i) % 8)));
}

// std::vector<std::byte>'s == compares byte by byte; memcmp is many times faster.
bool sameBytes(const std::vector<std::byte> &a, const std::vector<std::byte> &b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
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
                                                      " ranks (tp × dp × pp) but the job has " +
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

    // A rank's part of rows [from, to) of a parameter: runs of its local rows (its pieces,
    // clipped), back to back in a payload, each the parameter rows [paramLo, paramHi).
    struct Sub
    {
        int64_t paramLo, paramHi, localLo;
        size_t at; // in the payload
    };
    auto subsOf = [](const ParamShard &sh, int64_t from, int64_t to, int64_t localRowBytes,
                     std::vector<Sub> &subs) {
        subs.clear();
        size_t at = 0;
        for (const ShardPiece &pc : sh.pieces) {
            const int64_t lo = std::max(from, pc.paramRow),
                          hi = std::min(to, pc.paramRow + pc.rows);
            if (lo >= hi)
                continue;
            subs.push_back({lo, hi, pc.localRow + (lo - pc.paramRow), at});
            at += size_t((hi - lo) * localRowBytes);
        }
        return at;
    };
    // Between a payload and the parameter's rows [from, …) in `window` (whole rows of rowBytes):
    // a row-parallel shard holds bytes [colBegin, colEnd) of each row.
    auto move = [](const ParamShard &sh, const std::vector<Sub> &subs, int64_t from,
                   std::span<std::byte> window, std::span<std::byte> payload, int64_t rowBytes,
                   int64_t es, bool toWindow) {
        const bool cols = sh.colEnd > sh.colBegin;
        const int64_t localRowBytes = cols ? (sh.colEnd - sh.colBegin) * es : rowBytes;
        for (const Sub &u : subs) {
            std::byte *w =
                window.data() + (u.paramLo - from) * rowBytes + (cols ? sh.colBegin * es : 0);
            std::byte *q = payload.data() + u.at;
            const int64_t n = u.paramHi - u.paramLo;
            if (!cols) {
                toWindow ? std::memcpy(w, q, size_t(n * rowBytes))
                         : std::memcpy(q, w, size_t(n * rowBytes));
                continue;
            }
            for (int64_t i = 0; i < n; ++i, w += rowBytes, q += localRowBytes)
                toWindow ? std::memcpy(w, q, size_t(localRowBytes))
                         : std::memcpy(q, w, size_t(localRowBytes));
        }
    };

    // One rank's planned reads, clipped to the window, into its payload (which holds the initial
    // pattern until written).
    auto fillPayload = [&](const PerRank &pr, const std::vector<Sub> &subs, int64_t from,
                           int64_t to, std::span<std::byte> payload, DType dtype,
                           int64_t localRowBytes) -> Status {
        for (const ShardRead *read : pr.reads) {
            const int64_t lo = std::max(from, read->paramRow),
                          hi = std::min(to, read->paramRow + read->rows());
            if (lo >= hi)
                continue;
            auto it = byKey.find(read->key);
            if (it == byKey.end())
                return makeError(Error::Code::NotFound, "planned key is not in the checkpoint")
                    .atKey(read->key);
            Box box = readBox(*read);
            if (!read->sizes.empty()) { // rows are the first dim after any stacked index
                box.offsets[read->index.size()] += lo - read->paramRow;
                box.sizes[read->index.size()] = hi - lo;
            }
            if (it->second->dtype != dtype)
                return makeError(Error::Code::Unsupported,
                                 "sources of one parameter differ in dtype")
                    .atKey(read->key);
            // Straight into the payload: a run of local rows is contiguous.
            const int64_t localLo = read->localRow + (lo - read->paramRow);
            const Sub *u = nullptr;
            for (const Sub &x : subs)
                if (localLo >= x.localLo &&
                    localLo + (hi - lo) <= x.localLo + (x.paramHi - x.paramLo))
                    u = &x;
            const size_t len = size_t((hi - lo) * localRowBytes);
            if (!u)
                return makeError(Error::Code::Internal, "read outside its shard").atKey(read->key);
            const size_t at = u->at + size_t((localLo - u->localLo) * localRowBytes);
            if (at + len > payload.size())
                return makeError(Error::Code::Internal, "read outside its shard").atKey(read->key);
            if (Status st = readTensorInto(checkpoint, *it->second, box, payload.subspan(at, len));
                !st)
                return st;
            result.bytesRead += len;
        }
        return Ok{};
    };

    uint64_t done = 0;
    std::vector<std::byte> gathered;                  // a window of the gathered parameter
    std::vector<std::byte> direct;                    // the same rows, read directly
    std::vector<std::byte> sendBuf, recvBuf;          // one window's all-gather, with a status byte
    std::vector<std::vector<std::byte>> replicaStore; // one process: payloads not read in place
    std::vector<std::byte> replicaExpected;
    std::vector<Sub> subs;
    std::optional<Error> failed; // this rank's, until every rank has heard of it
    bool stop = false;
    uint32_t ordinal = 0; // parameters handled so far: which rank checks the next one
    std::vector<std::pair<uint32_t, ParamCheck>> checks;
    // One parameter's health is computed on another thread while the next one is read (its
    // window moves there, and comes back as the spare buffer).
    std::future<std::pair<Result<TensorHealth>, std::vector<std::byte>>> pending;
    uint32_t pendingParam = 0;
    std::vector<std::byte> spare;
    auto finishHealth = [&] {
        if (!pending.valid())
            return;
        auto [health, bytes] = pending.get();
        spare = std::move(bytes);
        if (!health)
            return;
        for (auto it = checks.rbegin(); it != checks.rend(); ++it)
            if (it->first == pendingParam) {
                it->second.health = std::move(*health);
                break;
            }
    };
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
        const int64_t rows = p.shape.empty() ? 1 : p.shape[0], rowBytes = row * es;
        const bool loadable = e && e->realLoadFills;
        // Rows [lo, hi) of the window, the columns `sh` holds of them, gathered against direct.
        auto sameRegion = [&](const ParamShard &sh, int64_t from, int64_t lo, int64_t hi) {
            const std::byte *g = gathered.data() + (lo - from) * rowBytes,
                            *d = direct.data() + (lo - from) * rowBytes;
            if (sh.colEnd == sh.colBegin)
                return std::memcmp(g, d, size_t((hi - lo) * rowBytes)) == 0;
            const size_t off = size_t(sh.colBegin * es),
                         len = size_t((sh.colEnd - sh.colBegin) * es);
            for (int64_t i = lo; i < hi; ++i, g += rowBytes, d += rowBytes)
                if (std::memcmp(g + off, d + off, len))
                    return false;
            return true;
        };

        // Memory: the gathered and direct copies of a window of rows, and across processes the
        // all-gather's buffers. A parameter over the budget streams through
        // windows that start on health segments, so that its statistics come out exactly the same.
        // Every row is held once, or by each TP rank of a TP-replicated parameter (whose extra
        // copies are kept apart and checked against the direct read).
        int holders = 1;
        for (const PerRank &pr : perParam[pi])
            holders += pr.shard->replica;
        holders = std::min<int>(holders, int(perParam[pi].size()));
        // (+1: the previous parameter's window, whose health is still being computed)
        const uint64_t copies = comm ? 4 + uint64_t(holders) : 2 + uint64_t(holders);
        int64_t windowRows = rows;
        if (options.maxMemory && uint64_t(numel * es) * copies > options.maxMemory) {
            const int64_t step = std::lcm(row, kernels::kSegment) / row; // rows per segment run
            const uint64_t perStep = uint64_t(step * rowBytes) * copies;
            if (p.shape.empty() || perStep > options.maxMemory) {
                check.outcome = ParamCheck::Outcome::Skipped;
                check.note = "even " + std::to_string(step) + " rows need " +
                             std::to_string(perStep) + " bytes, over --max-memory";
                if (owner == me)
                    checks.emplace_back(pi, std::move(check));
                continue;
            }
            windowRows = int64_t(options.maxMemory / perStep) * step;
        }
        const int64_t windows = (rows + windowRows - 1) / windowRows;
        std::optional<detail::HealthStream> stream;
        if (windows > 1)
            stream.emplace(dtype);
        detail::Sha256 sha;

        // Rows [from, to) of the gathered parameter into `gathered`: the initial pattern, then
        // every rank's local shard from exactly its planned reads. In one process each rank's
        // in turn; across processes this rank's own, and an all-gather puts all in place.
        struct Part
        {
            const PerRank *pr;
            std::vector<Sub> subs;
            size_t bytes;
            std::span<std::byte> payload; // replicas: where their copy is
        };
        std::vector<Part> parts, replicas;
        // Whole rows in one run (and not a replica): a span of the window itself, read in place.
        auto readsInPlace = [](const Part &part) {
            const ParamShard &sh = *part.pr->shard;
            return !sh.replica && sh.colEnd == sh.colBegin && part.subs.size() == 1;
        };
        auto gatherRows = [&](int64_t from, int64_t to) -> Status {
            gathered.resize(size_t((to - from) * rowBytes));
            parts.clear();
            replicas.clear();
            bool inPlace = !comm; // every part's reads land straight in the window
            for (const PerRank &pr : perParam[pi]) {
                Part part{&pr, {}, 0, {}};
                part.bytes = subsOf(*pr.shard, from, to, pr.shard->rowSize * es, part.subs);
                if (!part.bytes)
                    continue;
                inPlace = inPlace && readsInPlace(part);
                parts.push_back(std::move(part));
            }
            // The initial pattern: where reads write in place, only on the rows none of them
            // covers (a read that succeeds has written all its bytes); elsewhere everywhere, as
            // payloads start from it.
            if (inPlace) {
                std::vector<std::pair<int64_t, int64_t>> written;
                for (const Part &part : parts)
                    for (const ShardRead *read : part.pr->reads) {
                        const int64_t lo = std::max(from, read->paramRow),
                                      hi = std::min(to, read->paramRow + read->rows());
                        if (lo < hi)
                            written.emplace_back(lo, hi);
                    }
                std::sort(written.begin(), written.end());
                int64_t at = from;
                auto fillTo = [&](int64_t upTo) {
                    if (upTo > at)
                        fillInitial(std::span(gathered).subspan(size_t((at - from) * rowBytes),
                                                                size_t((upTo - at) * rowBytes)),
                                    pi + 1, uint64_t(at * rowBytes));
                };
                for (auto [lo, hi] : written) {
                    fillTo(lo);
                    at = std::max(at, hi);
                }
                fillTo(to);
            } else {
                fillInitial(gathered, pi + 1, uint64_t(from * rowBytes));
            }
            if (!comm) {
                size_t stored = 0;
                for (Part &part : parts) {
                    const ParamShard &sh = *part.pr->shard;
                    const int64_t localRowBytes = sh.rowSize * es;
                    if (readsInPlace(part)) {
                        const Sub &u = part.subs.front();
                        if (Status st =
                                fillPayload(*part.pr, part.subs, from, to,
                                            std::span(gathered).subspan(
                                                size_t((u.paramLo - from) * rowBytes), part.bytes),
                                            dtype, localRowBytes);
                            !st)
                            return st;
                        continue;
                    }
                    if (replicaStore.size() <= stored)
                        replicaStore.emplace_back();
                    auto &buf = replicaStore[stored++];
                    buf.resize(part.bytes);
                    move(sh, part.subs, from, gathered, buf, rowBytes, es, false); // initial
                    if (Status st =
                            fillPayload(*part.pr, part.subs, from, to, buf, dtype, localRowBytes);
                        !st)
                        return st;
                    if (sh.replica) {
                        part.payload = buf;
                        replicas.push_back(part);
                    } else {
                        move(sh, part.subs, from, gathered, buf, rowBytes, es, true);
                    }
                }
                return Ok{};
            }
            size_t longest = 0;
            for (const Part &part : parts)
                longest = std::max(longest, part.bytes);
            sendBuf.assign(longest + 1, std::byte{0});
            recvBuf.resize((longest + 1) * size_t(procs));
            for (const Part &part : parts)
                if (part.pr->rank == me && !failed) {
                    const auto payload = std::span(sendBuf).first(part.bytes);
                    move(*part.pr->shard, part.subs, from, gathered, payload, rowBytes, es, false);
                    if (Status st = fillPayload(*part.pr, part.subs, from, to, payload, dtype,
                                                part.pr->shard->rowSize * es);
                        !st)
                        failed = st.error();
                }
            const bool cancel = options.progress && !options.progress(done, total);
            sendBuf[longest] = std::byte(failed ? 1 : cancel ? 2 : 0);
            if (Status st = comm->allgather(sendBuf, recvBuf); !st)
                return st; // the job itself is broken: nothing more to agree on
            for (int r = 0; r < procs; ++r)
                if (const auto flag = recvBuf[size_t(r) * (longest + 1) + longest];
                    flag != std::byte{0}) {
                    stop = true;
                    result.cancelled = result.cancelled || flag == std::byte{2};
                }
            if (!stop)
                for (Part &part : parts) {
                    part.payload = std::span(recvBuf).subspan(size_t(part.pr->rank) * (longest + 1),
                                                              part.bytes);
                    if (part.pr->shard->replica)
                        replicas.push_back(part);
                    else
                        move(*part.pr->shard, part.subs, from, gathered, part.payload, rowBytes, es,
                             true);
                }
            return Ok{};
        };

        // Pass one checks every window; a streamed parameter takes a second pass for the
        // histogram and fingerprint, which need the whole parameter's range first.
        for (int pass = 1; pass <= (windows > 1 ? 2 : 1) && !stop; ++pass)
            for (int64_t w = 0; w < windows && !stop; ++w) {
                const int64_t from = w * windowRows, to = std::min(rows, from + windowRows);
                if (Status st = gatherRows(from, to); !st)
                    return st.error();
                if (stop)
                    break;
                if (pass == 1)
                    for (const PerRank &pr : perParam[pi])
                        if (me < 0 || pr.rank == me)
                            for (const ShardRead *read : pr.reads) {
                                const int64_t lo = std::max(from, read->paramRow),
                                              hi = std::min(to, read->paramRow + read->rows());
                                if (lo < hi)
                                    done += uint64_t((hi - lo) * rowBytes);
                            }
                if (owner != me) // another rank checks this one
                    continue;
                if (pass == 2) {
                    stream->count(gathered, from * row);
                    continue;
                }
                if (failed) // an earlier window's direct read: the others hear of it next
                    continue;

                // An independent direct read of the stored components (whole rows, not by the
                // plan's boxes), placed by the diff's rows: what the gathered shards must equal.
                if (loadable) {
                    // Each stored component's rows of this window, checked before use.
                    auto eachSource = [&](auto &&f) {
                        for (const DiffSource &src : e->sources) {
                            auto it = byKey.find(src.key);
                            if (it == byKey.end()) {
                                failed = makeError(Error::Code::NotFound,
                                                   "source is not in the checkpoint")
                                             .atKey(src.key);
                                return;
                            }
                            const auto piece = sourceRead(src, rows, from, to);
                            if (!piece)
                                continue;
                            const size_t at = size_t((piece->paramRow - from) * rowBytes),
                                         len = size_t(piece->rows() * rowBytes);
                            if (it->second->dtype != dtype || at + len > gathered.size()) {
                                failed = makeError(Error::Code::Format,
                                                   "source does not fit the parameter's rows")
                                             .atKey(src.key);
                                return;
                            }
                            if (Status st = f(*it->second, *piece, at, len); !st) {
                                failed = st.error();
                                return;
                            }
                            result.bytesRead += len;
                        }
                    };
                    // The gathered rows against the stored bytes, compared in place (no second
                    // copy of them goes through memory). Only a difference, rows no source
                    // covers, or TP-replicated copies to check need the direct read in full.
                    bool same = replicas.empty();
                    int64_t covered = 0;
                    if (same)
                        eachSource([&](const TensorEntry &t, const ShardRead &piece, size_t at,
                                       size_t len) -> Status {
                            if (!same)
                                return Ok{};
                            auto r = sameAsStored(checkpoint, t, readBox(piece),
                                                  std::span(gathered).subspan(at, len));
                            if (!r)
                                return r.error();
                            same = *r;
                            covered += piece.rows();
                            return Ok{};
                        });
                    same = same && covered == to - from;
                    if (!same && !failed) {
                        direct.resize(gathered.size()); // every row comes from a source
                        eachSource([&](const TensorEntry &t, const ShardRead &piece, size_t at,
                                       size_t len) {
                            return readTensorInto(checkpoint, t, readBox(piece),
                                                  std::span(direct).subspan(at, len));
                        });
                    }
                    if (failed) {
                        if (!comm)
                            return *failed;
                        continue;
                    }

                    // The gathered rows against the direct read, bit for bit. When every byte
                    // matches, so does every rank's split piece (the round trip below); only a
                    // mismatch needs the pieces compared one by one to say whose it is.
                    if (!same && !sameBytes(gathered, direct)) {
                        for (int64_t i = 0; i < (to - from) * row; ++i)
                            if (std::memcmp(direct.data() + i * es, gathered.data() + i * es,
                                            size_t(es))) {
                                if (check.firstMismatch < 0)
                                    check.firstMismatch = from * row + i;
                                ++check.mismatches;
                            }
                        // The round trip: split each rank's rows the way the save path does (§6.3:
                        // the flat slice intersected with each stored component's rows, a TP rank's
                        // sections at their TP offsets) and compare every piece with that
                        // component's stored bytes.
                        for (const PerRank &pr : perParam[pi]) {
                            if (pr.shard->replica)
                                continue;
                            subsOf(*pr.shard, from, to, pr.shard->rowSize * es, subs);
                            for (const Sub &u : subs)
                                for (const DiffSource &src : e->sources) {
                                    const auto piece = sourceRead(src, rows, u.paramLo, u.paramHi);
                                    if (piece && !sameRegion(*pr.shard, from, piece->paramRow,
                                                             piece->paramRow + piece->rows())) {
                                        check.roundTrip = false;
                                        check.note = "rank " + std::to_string(pr.rank) +
                                                     ": the split piece for " + src.key +
                                                     " differs from the stored bytes";
                                    }
                                }
                        }
                    }
                } else {
                    // No source: the rows must still hold the initial pattern.
                    direct.resize(gathered.size());
                    fillInitial(direct, pi + 1, uint64_t(from * rowBytes));
                    if (!sameBytes(gathered, direct))
                        check.note = "no source, yet something was written into it";
                }
                // Each TP rank's copy of a TP-replicated parameter, against the same rows.
                for (const Part &h : replicas) {
                    const ParamShard &sh = *h.pr->shard;
                    replicaExpected.resize(h.payload.size());
                    move(sh, h.subs, from, direct, replicaExpected, rowBytes, es, false);
                    if (std::memcmp(replicaExpected.data(), h.payload.data(), h.payload.size()) ==
                        0)
                        continue;
                    check.roundTrip = false;
                    check.note = "rank " + std::to_string(h.pr->rank) +
                                 ": its copy of this TP-replicated parameter differs";
                    const int64_t localRow = sh.rowSize,
                                  col0 = sh.colEnd > sh.colBegin ? sh.colBegin : 0;
                    for (const Sub &u : h.subs)
                        for (int64_t i = 0; i < (u.paramHi - u.paramLo) * localRow; ++i) {
                            const size_t at = u.at + size_t(i * es);
                            if (std::memcmp(replicaExpected.data() + at, h.payload.data() + at,
                                            size_t(es)) == 0)
                                continue;
                            ++check.mismatches;
                            const int64_t flat =
                                (u.paramLo + i / localRow) * row + col0 + i % localRow;
                            if (check.firstMismatch < 0 || flat < check.firstMismatch)
                                check.firstMismatch = flat;
                        }
                }
                if (stream)
                    stream->fold(gathered, from * row);
                if (options.hash)
                    sha.update(gathered);
                if (windows == 1) { // health on the side while the next parameter is read
                    finishHealth();
                    TensorData whole;
                    whole.dtype = dtype;
                    whole.shape = p.shape;
                    whole.bytes = std::move(gathered);
                    gathered = std::move(spare);
                    pendingParam = pi;
                    pending =
                        std::async(std::launch::async, [whole = std::move(whole), gpu]() mutable {
                            auto health = gpu ? computeHealth(whole, ComputeDevice::Cuda)
                                              : computeHealth(whole);
                            if (!health && gpu)
                                health = computeHealth(whole); // a device failure: the CPU agrees
                            return std::pair(std::move(health), std::move(whole.bytes));
                        });
                }
            }
        if (stop || owner != me)
            continue;
        if (failed) {
            if (!comm)
                return *failed;
            continue;
        }
        if (stream && stream->supported())
            check.health = stream->finish();
        if (options.hash)
            check.sha256 = sha.hex();
        if (!loadable)
            check.outcome = check.note.empty() ? ParamCheck::Outcome::KeptInitial
                                               : ParamCheck::Outcome::Mismatch;
        else
            check.outcome =
                check.mismatches ? ParamCheck::Outcome::Mismatch : ParamCheck::Outcome::Identical;
        if (!loadable && check.note.empty())
            check.note = "no source: the load leaves its initial values";
        if (windows > 1)
            check.note += std::string(check.note.empty() ? "" : "; ") + "streamed in " +
                          std::to_string(windows) + " windows of " + std::to_string(windowRows) +
                          " rows";
        checks.emplace_back(pi, std::move(check));

        if (!comm && options.progress && !options.progress(done, total)) {
            result.cancelled = true;
            break;
        }
    }

    finishHealth();
    for (auto &[pi, c] : checks)
        c.fingerprint = c.health.device.empty() ? "" : hex64(c.health.fingerprint);

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
