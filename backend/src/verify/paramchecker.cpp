// SPDX-License-Identifier: MIT
#include "verify/paramchecker.h"
#include "common/sha256.h"
#include "common/shapes.h"
#include "health/healthstream.h"

#include "shardscope/devices.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace shardscope::detail {

namespace {

// std::vector<std::byte>'s == compares byte by byte; memcmp is many times faster.
bool sameBytes(const std::vector<std::byte> &a, const std::vector<std::byte> &b)
{
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

} // namespace

VerifyRun::VerifyRun(const CheckpointIndex &checkpoint_, const Layout &layout_,
                     const DiffResult &diff, const LoadPlan &plan, const VerifyOptions &options_)
    : checkpoint(checkpoint_)
    , layout(layout_)
    , options(options_)
{
    comm = options.comm && options.comm->size() > 1 ? options.comm : nullptr;
    me = comm ? comm->rank() : -1;
    procs = comm ? comm->size() : 1;
    gpu = options.useGpu && builtWithCuda() && !cudaDevices().empty();
    for (const TensorEntry &t : checkpoint.tensors)
        byKey.emplace(t.key, &t);
    for (const DiffEntry &e : diff.entries)
        if (e.section == Section::Model)
            entryOf.emplace(e.param, &e);
    // Reads and shards per parameter, over all ranks (rank order = gather order).
    perParam.resize(layout.params.size());
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
}

bool VerifyRun::reportProgress()
{
    if (cancelled || !options.progress)
        return !cancelled;
    std::lock_guard lock(m_progressMutex);
    if (!cancelled && !options.progress(done, total))
        cancelled = true;
    return !cancelled;
}

uint64_t VerifyRun::copies(uint32_t param) const
{
    // Every row is held once, or by each TP rank of a TP-replicated parameter (whose extra
    // copies are kept apart and checked against the direct read).
    int holders = 1;
    for (const PerRank &pr : perParam[param])
        holders += pr.shard->replica;
    holders = std::min<int>(holders, int(perParam[param].size()));
    return (comm ? 3 : 1) + uint64_t(overlap) + uint64_t(holders);
}

const DiffEntry *VerifyRun::entry(uint32_t param) const
{
    const auto it = entryOf.find(layout.params[param].name);
    return it == entryOf.end() ? nullptr : it->second;
}

DType VerifyRun::storedDType(uint32_t param) const
{
    // Bytes are compared in the stored dtype (a cast would change them by design).
    const DType asked = dtypeFromName(layout.params[param].dtype).value_or(DType::Float32);
    const DiffEntry *e = entry(param);
    return e && !e->sources.empty() ? dtypeFromName(e->sources.front().dtype).value_or(asked)
                                    : asked;
}

uint64_t VerifyRun::wholeNeed(uint32_t param) const
{
    return uint64_t(product(layout.params[param].shape) * elementSize(storedDType(param))) *
           copies(param);
}

Result<TensorHealth> healthOf(const TensorData &tensor, bool gpu, int threads)
{
    auto health = gpu ? computeHealth(tensor, ComputeDevice::Cuda)
                      : computeHealthOn(tensor, ComputeDevice::Cpu, threads);
    if (!health && gpu) // a device failure: the CPU agrees bit for bit
        health = computeHealthOn(tensor, ComputeDevice::Cpu, threads);
    return health;
}

struct ParamChecker::Param
{
    uint32_t index;
    const LayoutParam &layout;
    const DiffEntry *entry;
    DType dtype;
    int64_t es, row, rows, rowBytes;
    bool loadable;
};

// This process's planned bytes of rows [from, to) of a parameter, as done.
// (A row of a rank's shard: its columns only, for a row-parallel parameter; as RankPlan::bytes.)
void ParamChecker::countDone(uint32_t param, int64_t from, int64_t to, int64_t elementSize)
{
    for (const VerifyRun::PerRank &pr : m_run.perParam[param])
        if (m_run.me < 0 || pr.rank == m_run.me)
            for (const ShardRead *read : pr.reads) {
                const int64_t lo = std::max(from, read->paramRow),
                              hi = std::min(to, read->paramRow + read->rows());
                if (lo < hi)
                    m_run.done += uint64_t((hi - lo) * pr.shard->rowSize * elementSize);
            }
}

// One rank's planned reads, clipped to the rows [from, to), into its payload (which holds the
// initial pattern until written).
Status ParamChecker::fillPayload(const VerifyRun::PerRank &pr, const std::vector<RowRun> &runs,
                                 int64_t from, int64_t to, std::span<std::byte> payload,
                                 DType dtype, int64_t localRowBytes)
{
    for (const ShardRead *read : pr.reads) {
        const int64_t lo = std::max(from, read->paramRow),
                      hi = std::min(to, read->paramRow + read->rows());
        if (lo >= hi)
            continue;
        auto it = m_run.byKey.find(read->key);
        if (it == m_run.byKey.end())
            return makeError(Error::Code::NotFound, "planned key is not in the checkpoint")
                .atKey(read->key);
        Box box = readBox(*read);
        if (!read->sizes.empty()) { // rows are the first dim after any stacked index
            box.offsets[read->index.size()] += lo - read->paramRow;
            box.sizes[read->index.size()] = hi - lo;
        }
        if (it->second->dtype != dtype)
            return makeError(Error::Code::Unsupported, "sources of one parameter differ in dtype")
                .atKey(read->key);
        // Straight into the payload: a run of local rows is contiguous.
        const int64_t localLo = read->localRow + (lo - read->paramRow);
        const RowRun *u = nullptr;
        for (const RowRun &x : runs)
            if (localLo >= x.localLo && localLo + (hi - lo) <= x.localLo + (x.paramHi - x.paramLo))
                u = &x;
        const size_t len = size_t((hi - lo) * localRowBytes);
        if (!u)
            return makeError(Error::Code::Internal, "read outside its shard").atKey(read->key);
        const size_t at = u->at + size_t((localLo - u->localLo) * localRowBytes);
        if (at + len > payload.size())
            return makeError(Error::Code::Internal, "read outside its shard").atKey(read->key);
        if (Status st =
                readTensorInto(m_run.checkpoint, *it->second, box, payload.subspan(at, len));
            !st)
            return st;
        m_run.bytesRead += len;
    }
    return Ok{};
}

// Rows [from, to) of the gathered parameter into m_gathered: the initial pattern, then every
// rank's local shard from exactly its planned reads. In one process each rank's in turn; across
// processes this rank's own, and an all-gather puts all in place.
Status ParamChecker::gatherRows(const Param &p, int64_t from, int64_t to)
{
    const int64_t rowBytes = p.rowBytes, es = p.es;
    const auto &holding = m_run.perParam[p.index];
    Communicator *comm = m_run.comm;
    m_gathered.resize(size_t((to - from) * rowBytes));
    m_parts.clear();
    m_replicas.clear();
    // Whole rows in one run (and not a replica): a span of the window itself, read in place.
    auto readsInPlace = [](const Part &part) {
        const ParamShard &sh = *part.pr->shard;
        return !sh.replica && sh.colEnd == sh.colBegin && part.runs.size() == 1;
    };
    bool inPlace = !comm; // every part's reads land straight in the window
    for (const VerifyRun::PerRank &pr : holding) {
        Part part{&pr, {}, 0, {}};
        part.bytes = rowRunsOf(*pr.shard, from, to, pr.shard->rowSize * es, part.runs);
        if (!part.bytes)
            continue;
        inPlace = inPlace && readsInPlace(part);
        m_parts.push_back(std::move(part));
    }
    // The initial pattern: where reads write in place, only on the rows none of them covers (a
    // read that succeeds has written all its bytes); elsewhere everywhere, as payloads start
    // from it.
    if (inPlace) {
        std::vector<std::pair<int64_t, int64_t>> written;
        for (const Part &part : m_parts)
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
                fillInitial(
                    std::span(m_gathered)
                        .subspan(size_t((at - from) * rowBytes), size_t((upTo - at) * rowBytes)),
                    p.index + 1, uint64_t(at * rowBytes));
        };
        for (auto [lo, hi] : written) {
            fillTo(lo);
            at = std::max(at, hi);
        }
        fillTo(to);
    } else {
        fillInitial(m_gathered, p.index + 1, uint64_t(from * rowBytes));
    }
    if (!comm) {
        size_t stored = 0;
        for (Part &part : m_parts) {
            const ParamShard &sh = *part.pr->shard;
            const int64_t localRowBytes = sh.rowSize * es;
            if (readsInPlace(part)) {
                const RowRun &u = part.runs.front();
                if (Status st =
                        fillPayload(*part.pr, part.runs, from, to,
                                    std::span(m_gathered)
                                        .subspan(size_t((u.paramLo - from) * rowBytes), part.bytes),
                                    p.dtype, localRowBytes);
                    !st)
                    return st;
                continue;
            }
            if (m_replicaStore.size() <= stored)
                m_replicaStore.emplace_back();
            auto &buf = m_replicaStore[stored++];
            buf.resize(part.bytes);
            moveRows(sh, part.runs, from, m_gathered, buf, rowBytes, es, false); // initial
            if (Status st = fillPayload(*part.pr, part.runs, from, to, buf, p.dtype, localRowBytes);
                !st)
                return st;
            if (sh.replica) {
                part.payload = buf;
                m_replicas.push_back(part);
            } else {
                moveRows(sh, part.runs, from, m_gathered, buf, rowBytes, es, true);
            }
        }
        return Ok{};
    }
    const int me = m_run.me, procs = m_run.procs;
    size_t longest = 0;
    for (const Part &part : m_parts)
        longest = std::max(longest, part.bytes);
    m_sendBuf.assign(longest + 1, std::byte{0});
    m_recvBuf.resize((longest + 1) * size_t(procs));
    for (const Part &part : m_parts)
        if (part.pr->rank == me && !m_failed) {
            const auto payload = std::span(m_sendBuf).first(part.bytes);
            moveRows(*part.pr->shard, part.runs, from, m_gathered, payload, rowBytes, es, false);
            if (Status st = fillPayload(*part.pr, part.runs, from, to, payload, p.dtype,
                                        part.pr->shard->rowSize * es);
                !st)
                m_failed = st.error();
        }
    const auto &progress = m_run.options.progress;
    const bool cancel = progress && !progress(m_run.done, m_run.total);
    m_sendBuf[longest] = std::byte(m_failed ? 1 : cancel ? 2 : 0);
    if (Status st = comm->allgather(m_sendBuf, m_recvBuf); !st)
        return st; // the job itself is broken: nothing more to agree on
    for (int r = 0; r < procs; ++r)
        if (const auto flag = m_recvBuf[size_t(r) * (longest + 1) + longest];
            flag != std::byte{0}) {
            m_stop = true;
            m_cancelled = m_cancelled || flag == std::byte{2};
        }
    if (!m_stop)
        for (Part &part : m_parts) {
            part.payload =
                std::span(m_recvBuf).subspan(size_t(part.pr->rank) * (longest + 1), part.bytes);
            if (part.pr->shard->replica)
                m_replicas.push_back(part);
            else
                moveRows(*part.pr->shard, part.runs, from, m_gathered, part.payload, rowBytes, es,
                         true);
        }
    return Ok{};
}

// The gathered rows [from, to) against an independent direct read of the stored components
// (whole rows, not by the plan's boxes, placed by the diff's rows), the round trip and every
// TP-replicated copy. A read that fails sets m_failed.
void ParamChecker::checkWindow(const Param &p, ParamCheck &check, int64_t from, int64_t to)
{
    const int64_t es = p.es, row = p.row, rowBytes = p.rowBytes;
    const DiffEntry *e = p.entry;
    // Rows [lo, hi) of the window, the columns `sh` holds of them, gathered against direct.
    auto sameRegion = [&](const ParamShard &sh, int64_t lo, int64_t hi) {
        const std::byte *g = m_gathered.data() + (lo - from) * rowBytes,
                        *d = m_direct.data() + (lo - from) * rowBytes;
        if (sh.colEnd == sh.colBegin)
            return std::memcmp(g, d, size_t((hi - lo) * rowBytes)) == 0;
        const size_t off = size_t(sh.colBegin * es), len = size_t((sh.colEnd - sh.colBegin) * es);
        for (int64_t i = lo; i < hi; ++i, g += rowBytes, d += rowBytes)
            if (std::memcmp(g + off, d + off, len))
                return false;
        return true;
    };
    if (p.loadable) {
        // Each stored component's rows of this window, checked before use.
        auto eachSource = [&](auto &&f) {
            for (const DiffSource &src : e->sources) {
                auto it = m_run.byKey.find(src.key);
                if (it == m_run.byKey.end()) {
                    m_failed = makeError(Error::Code::NotFound, "source is not in the checkpoint")
                                   .atKey(src.key);
                    return;
                }
                const auto piece = sourceRead(src, p.rows, from, to);
                if (!piece)
                    continue;
                const size_t at = size_t((piece->paramRow - from) * rowBytes),
                             len = size_t(piece->rows() * rowBytes);
                if (it->second->dtype != p.dtype || at + len > m_gathered.size()) {
                    m_failed =
                        makeError(Error::Code::Format, "source does not fit the parameter's rows")
                            .atKey(src.key);
                    return;
                }
                if (Status st = f(*it->second, *piece, at, len); !st) {
                    m_failed = st.error();
                    return;
                }
                m_run.bytesRead += len;
            }
        };
        // The gathered rows against the stored bytes, compared in place (no second copy of them
        // goes through memory). Only a difference, rows no source covers, or TP-replicated
        // copies to check need the direct read in full.
        bool same = m_replicas.empty();
        int64_t covered = 0;
        if (same)
            eachSource(
                [&](const TensorEntry &t, const ShardRead &piece, size_t at, size_t len) -> Status {
                    if (!same)
                        return Ok{};
                    auto r = sameAsStored(m_run.checkpoint, t, readBox(piece),
                                          std::span(m_gathered).subspan(at, len));
                    if (!r)
                        return r.error();
                    same = *r;
                    covered += piece.rows();
                    return Ok{};
                });
        same = same && covered == to - from;
        if (!same && !m_failed) {
            m_direct.resize(m_gathered.size()); // every row comes from a source
            eachSource([&](const TensorEntry &t, const ShardRead &piece, size_t at, size_t len) {
                return readTensorInto(m_run.checkpoint, t, readBox(piece),
                                      std::span(m_direct).subspan(at, len));
            });
        }
        if (m_failed)
            return;

        // The gathered rows against the direct read, bit for bit. When every byte matches, so
        // does every rank's split piece (the round trip below); only a mismatch needs the pieces
        // compared one by one to say whose it is.
        if (!same && !sameBytes(m_gathered, m_direct)) {
            for (int64_t i = 0; i < (to - from) * row; ++i)
                if (std::memcmp(m_direct.data() + i * es, m_gathered.data() + i * es, size_t(es))) {
                    if (check.firstMismatch < 0)
                        check.firstMismatch = from * row + i;
                    ++check.mismatches;
                }
            // The round trip: split each rank's rows the way the save path does (§6.3: the flat
            // slice intersected with each stored component's rows, a TP rank's sections at their
            // TP offsets) and compare every piece with that component's stored bytes.
            for (const VerifyRun::PerRank &pr : m_run.perParam[p.index]) {
                if (pr.shard->replica)
                    continue;
                rowRunsOf(*pr.shard, from, to, pr.shard->rowSize * es, m_runs);
                for (const RowRun &u : m_runs)
                    for (const DiffSource &src : e->sources) {
                        const auto piece = sourceRead(src, p.rows, u.paramLo, u.paramHi);
                        if (piece && !sameRegion(*pr.shard, piece->paramRow,
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
        m_direct.resize(m_gathered.size());
        fillInitial(m_direct, p.index + 1, uint64_t(from * rowBytes));
        if (!sameBytes(m_gathered, m_direct))
            check.note = "no source, yet something was written into it";
    }
    // Each TP rank's copy of a TP-replicated parameter, against the same rows.
    for (const Part &h : m_replicas) {
        const ParamShard &sh = *h.pr->shard;
        m_replicaExpected.resize(h.payload.size());
        moveRows(sh, h.runs, from, m_direct, m_replicaExpected, rowBytes, es, false);
        if (std::memcmp(m_replicaExpected.data(), h.payload.data(), h.payload.size()) == 0)
            continue;
        check.roundTrip = false;
        check.note = "rank " + std::to_string(h.pr->rank) +
                     ": its copy of this TP-replicated parameter differs";
        const int64_t localRow = sh.rowSize, col0 = sh.colEnd > sh.colBegin ? sh.colBegin : 0;
        for (const RowRun &u : h.runs)
            for (int64_t i = 0; i < (u.paramHi - u.paramLo) * localRow; ++i) {
                const size_t at = u.at + size_t(i * es);
                if (std::memcmp(m_replicaExpected.data() + at, h.payload.data() + at, size_t(es)) ==
                    0)
                    continue;
                ++check.mismatches;
                const int64_t flat = (u.paramLo + i / localRow) * row + col0 + i % localRow;
                if (check.firstMismatch < 0 || flat < check.firstMismatch)
                    check.firstMismatch = flat;
            }
    }
}

Result<std::optional<CheckedParam>> ParamChecker::check(uint32_t param, int owner)
{
    const LayoutParam &lp = m_run.layout.params[param];
    const int me = m_run.me;
    const bool comm = m_run.comm;
    ParamCheck check;
    check.name = lp.name;
    check.shape = lp.shape;
    check.ranksHolding = int(m_run.perParam[param].size());
    const DiffEntry *e = m_run.entry(param);
    const DType dtype = m_run.storedDType(param);
    check.dtype = std::string(dtypeName(dtype));
    const int64_t es = elementSize(dtype), numel = product(lp.shape);
    const int64_t row = lp.shape.size() > 1 ? product(lp.shape, 1) : 1;
    const int64_t rows = lp.shape.empty() ? 1 : lp.shape[0];
    // A wrong source is read as the load reads it: the check shows what it really fills in.
    const Param p{
        param, lp, e, dtype, es, row, rows, row * es, e && (e->realLoadFills || e->wrongSource)};
    check.sourced = p.loadable;
    // Decided without reading, the same way on every rank: only the owner reports it.
    auto unread = [&](ParamCheck::Outcome outcome, std::string note) {
        check.outcome = outcome;
        check.note = std::move(note);
        return owner == me ? std::optional(CheckedParam{std::move(check), std::nullopt})
                           : std::optional<CheckedParam>();
    };
    if (e && e->status == LoadStatus::Unreadable)
        return unread(ParamCheck::Outcome::Unreadable, e->reason);

    // Memory: the copies of a window of rows (VerifyRun::copies). A parameter over the budget
    // streams through windows that start on health segments, so that its statistics come out
    // exactly the same.
    const uint64_t copies = m_run.copies(param), budget = m_run.budget;
    int64_t windowRows = rows;
    if (budget && uint64_t(numel * es) * copies > budget) {
        const int64_t step = std::lcm(row, kernels::kSegment) / row; // rows per segment run
        const uint64_t perStep = uint64_t(step * p.rowBytes) * copies;
        if (lp.shape.empty() || perStep > budget) {
            countDone(param, 0, rows, es); // not read, but done with: the bar ends full
            if (!comm)
                m_run.reportProgress(); // a cancel here is seen before the next parameter
            return unread(ParamCheck::Outcome::Skipped,
                          "even " + std::to_string(step) + " rows need " + std::to_string(perStep) +
                              " bytes, over --max-memory");
        }
        windowRows = int64_t(budget / perStep) * step;
    }
    const int64_t windows = (rows + windowRows - 1) / windowRows;
    std::optional<HealthStream> stream;
    if (windows > 1)
        stream.emplace(dtype);
    Sha256 sha;
    if (!m_spare.empty() && m_gathered.empty())
        m_gathered = std::move(m_spare);

    // Pass one checks every window; a streamed parameter takes a second pass for the histogram
    // and fingerprint, which need the whole parameter's range first.
    for (int pass = 1; pass <= (windows > 1 ? 2 : 1) && !m_stop; ++pass)
        for (int64_t w = 0; w < windows && !m_stop; ++w) {
            const int64_t from = w * windowRows, to = std::min(rows, from + windowRows);
            if (Status st = gatherRows(p, from, to); !st)
                return st.error();
            if (m_stop)
                break;
            if (pass == 1)
                countDone(param, from, to, es);
            // Across processes progress and cancel travel with the window's all-gather; here a
            // cancel stops within the parameter.
            if (!comm && !m_run.reportProgress()) {
                m_stop = m_cancelled = true;
                break;
            }
            if (owner != me) // another rank checks this one
                continue;
            if (pass == 2) {
                stream->count(m_gathered, from * row);
                continue;
            }
            if (m_failed) // an earlier window's direct read: the others hear of it next
                continue;
            checkWindow(p, check, from, to);
            if (m_failed) {
                if (!comm)
                    return *m_failed;
                continue;
            }
            if (stream)
                stream->fold(m_gathered, from * row);
            if (m_run.options.hash)
                sha.update(m_gathered);
        }
    if (m_stop || owner != me)
        return std::optional<CheckedParam>();
    if (m_failed) {
        if (!comm)
            return *m_failed;
        return std::optional<CheckedParam>();
    }
    if (stream && stream->supported())
        check.health = stream->finish();
    if (m_run.options.hash)
        check.sha256 = sha.hex();
    if (!p.loadable)
        check.outcome =
            check.note.empty() ? ParamCheck::Outcome::KeptInitial : ParamCheck::Outcome::Mismatch;
    else if (check.mismatches)
        check.outcome = ParamCheck::Outcome::Mismatch;
    else if (e && e->wrongSource) {
        check.outcome = ParamCheck::Outcome::WrongSource;
        check.note = e->reason;
    } else
        check.outcome = ParamCheck::Outcome::Identical;
    if (!p.loadable && check.note.empty())
        check.note = e && e->status == LoadStatus::Partial
                         ? e->reason // the covered part loads; nothing here reads it
                         : "no source: the load leaves its initial values";
    if (windows > 1)
        check.note += std::string(check.note.empty() ? "" : "; ") + "streamed in " +
                      std::to_string(windows) + " windows of " + std::to_string(windowRows) +
                      " rows";
    CheckedParam out{std::move(check), std::nullopt};
    if (windows == 1) { // its health is the caller's: beside the next read, or on this thread
        TensorData whole;
        whole.dtype = dtype;
        whole.shape = lp.shape;
        whole.bytes = std::move(m_gathered);
        m_gathered = std::move(m_spare);
        m_spare.clear();
        out.healthInput = std::move(whole);
    }
    return std::optional<CheckedParam>(std::move(out));
}

} // namespace shardscope::detail
