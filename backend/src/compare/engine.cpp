// SPDX-License-Identifier: MIT
// The value comparison: each tensor pair read in row blocks that fit the memory budget, both
// sides in their stored dtypes, the differences folded by the shared kernels. A pair is compared
// wholly by one thread of one process, so the results do not depend on how the work is split;
// across processes each rank takes every procs-th comparable pair and all merge the same list.
#include "common/rankresults.h"
#include "compare/blockdiff.h"
#include "compare/compare.h"
#include "compare/valuediffwire.h"
#include "health/healthstream.h"
#include "shardscope/devices.h"
#include "shardscope/loadplan.h"
#include "shardscope/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <numeric>
#include <thread>

namespace shardscope::detail {

namespace {

using namespace kernels;

std::vector<int64_t> multiIndex(int64_t flat, const std::vector<int64_t> &shape)
{
    std::vector<int64_t> at(shape.size(), 0);
    for (size_t d = shape.size(); d-- > 0;) {
        if (shape[d] > 0) {
            at[d] = flat % shape[d];
            flat /= shape[d];
        }
    }
    return at;
}

int floatBits(int code)
{
    switch (code) {
    case kF64:
        return 64;
    case kF32:
        return 32;
    case kBF16:
    case kF16:
        return 16;
    default:
        return 0;
    }
}

// The narrower float dtype of the two, for ULP distances; -1 when either is no float the ULP
// measure covers, or they are bfloat16 and float16 (no common grid).
int ulpCodeOf(int codeA, int codeB)
{
    const int ba = floatBits(codeA), bb = floatBits(codeB);
    if (!ba || !bb || (ba == 16 && bb == 16 && codeA != codeB))
        return -1;
    return ba <= bb ? codeA : codeB;
}

// Rows [r0, r1) of one side's tensor, assembled from its pieces into `out`.
Status fillRows(const CheckpointIndex &c, const SideValues &v, int64_t rows, int64_t r0, int64_t r1,
                int64_t rowBytes, std::byte *out, uint64_t &bytesRead)
{
    for (const DiffSource &s : v.sources) {
        const auto read = sourceRead(s, rows, r0, r1);
        if (!read)
            continue;
        const TensorEntry *t = sourceTensor(c, s);
        if (!t)
            return makeError(Error::Code::NotFound, "no such tensor")
                .inFile(c.inputPath)
                .atKey(read->key);
        const size_t size = size_t(read->rows() * rowBytes);
        Status st =
            readTensorInto(c, *t, readBox(*read), {out + (read->paramRow - r0) * rowBytes, size});
        if (!st)
            return st;
        bytesRead += size;
    }
    return Ok{};
}

ValueSideStats sideStats(const Accum &a)
{
    ValueSideStats s;
    s.count = a.count;
    s.finite = a.finite;
    if (a.finite) {
        s.mean = a.mean;
        s.std = std::sqrt(a.m2 / double(a.finite));
        s.min = a.min;
        s.max = a.max;
    }
    return s;
}

std::string dtypeOfCode(int code)
{
    switch (code) {
    case kF64:
        return "float64";
    case kF32:
        return "float32";
    case kBF16:
        return "bfloat16";
    case kF16:
        return "float16";
    default:
        return {};
    }
}

struct Job
{
    const CheckpointIndex &a, &b;
    const CompareOptions &options;
    bool gpu = false;
    std::atomic<uint64_t> done{0};
    uint64_t total = 0;
    std::atomic<uint64_t> bytesRead{0};
    std::atomic<bool> stop{false};
    std::mutex progressLock;

    bool progress()
    {
        if (!options.progress)
            return !stop;
        std::lock_guard lock(progressLock);
        if (!options.progress(done, total))
            stop = true;
        return !stop;
    }
};

Result<TensorValueDiff> comparePair(Job &job, const TensorPair &pair, uint64_t budget, int threads)
{
    TensorValueDiff r;
    r.name = pair.name;
    r.state = pair.state;
    r.shape = pair.shape;
    r.dtypeA = pair.a->dtype;
    r.dtypeB = pair.b->dtype;
    for (const DiffSource &s : pair.a->sources)
        r.keysA.push_back(s.key);
    for (const DiffSource &s : pair.b->sources)
        r.keysB.push_back(s.key);
    const auto da = dtypeFromName(r.dtypeA), db = dtypeFromName(r.dtypeB);
    const int ca = da ? kernelCode(*da).value_or(-1) : -1;
    const int cb = db ? kernelCode(*db).value_or(-1) : -1;
    if (ca < 0 || cb < 0) {
        r.why = "dtype " + (ca < 0 ? r.dtypeA : r.dtypeB) + " has no value kernels";
        return r;
    }
    // A complex tensor compares as its real and imaginary parts (as its health does).
    const int parts = kernelParts(*da);
    if (parts != kernelParts(*db)) {
        r.why = "a complex dtype against a real one (" + r.dtypeA + ", " + r.dtypeB + ")";
        return r;
    }
    const int sa = elementSize(*da) / parts, sb = elementSize(*db) / parts;
    int64_t n = parts;
    for (int64_t d : r.shape)
        n *= d;
    const int64_t rows = r.shape.empty() ? 1 : r.shape[0];
    const int64_t rowElems = rows > 0 ? n / rows : 0;
    const int64_t rowA = rowElems * sa, rowB = rowElems * sb;
    DiffParams params{job.options.atol, job.options.rtol, ulpCodeOf(ca, cb), *da == *db};
    BlockTotals t;
    if (params.ulpCode >= 0)
        t.diff.maxUlp = 0;
    if (n > 0) {
        // Blocks of whole kSegment multiples where the budget allows: the same segments, and so
        // the same bits, whatever the budget.
        const int64_t unit = kSegment / std::gcd(rowElems, kSegment);
        int64_t blockRows =
            std::max<int64_t>(1, int64_t(budget) / std::max<int64_t>(1, rowA + rowB));
        if (blockRows >= unit)
            blockRows = blockRows / unit * unit;
        blockRows = std::min(blockRows, rows);
        std::vector<std::byte> bufA(size_t(blockRows * rowA)), bufB(size_t(blockRows * rowB));
        std::string device;
        for (int64_t r0 = 0; r0 < rows; r0 += blockRows) {
            if (job.stop)
                return makeError(Error::Code::Cancelled, "cancelled");
            const int64_t r1 = std::min(rows, r0 + blockRows);
            uint64_t read = 0;
            Status st = fillRows(job.a, *pair.a, rows, r0, r1, rowA, bufA.data(), read);
            if (st)
                st = fillRows(job.b, *pair.b, rows, r0, r1, rowB, bufB.data(), read);
            if (!st) { // this tensor only: the others are still compared
                r.unreadable = true;
                r.why = st.error().toString();
                return r;
            }
            job.bytesRead += read;
            diffBlock({bufA.data(), ca, sa}, {bufB.data(), cb, sb}, (r1 - r0) * rowElems,
                      r0 * rowElems, params, threads, job.gpu, t, device);
            job.done += uint64_t((r1 - r0) * (rowA + rowB));
            if (!job.progress())
                return makeError(Error::Code::Cancelled, "cancelled");
        }
        r.device = device;
    } else {
        r.device = "cpu";
    }
    const DiffAccum &d = t.diff;
    r.count = n; // a complex tensor: its parts
    r.differing = d.differing;
    r.outside = d.outside;
    r.nonfinite = d.nonfinite;
    if (d.firstDiff >= 0)
        r.firstDiff = multiIndex(d.firstDiff / parts, r.shape);
    if (d.maxAbsAt >= 0)
        r.maxAbsAt = multiIndex(d.maxAbsAt / parts, r.shape);
    const double finite = double(n - d.nonfinite);
    r.maxAbs = d.maxAbs;
    r.maxRel = d.maxRel;
    r.meanAbs = finite > 0 ? d.sumAbs / finite : 0;
    r.rms = finite > 0 ? std::sqrt(d.sumSq / finite) : 0;
    r.relL2 = d.sumB2 > 0 ? std::sqrt(d.sumSq) / std::sqrt(d.sumB2) : d.sumSq > 0 ? INFINITY : 0.0;
    r.cosine = d.sumA2 > 0 && d.sumB2 > 0 ? d.sumAB / (std::sqrt(d.sumA2) * std::sqrt(d.sumB2))
               : d.sumA2 == d.sumB2       ? 1.0
                                          : 0.0;
    r.maxUlp = d.maxUlp;
    r.ulpDtype = params.ulpCode >= 0 ? dtypeOfCode(params.ulpCode) : "";
    r.histogram.assign(t.hist.begin(), t.hist.end());
    r.a = sideStats(t.a);
    r.b = sideStats(t.b);
    r.verdict = d.differing == 0 ? TensorValueDiff::Verdict::Identical
                : d.outside == 0 ? TensorValueDiff::Verdict::Within
                                 : TensorValueDiff::Verdict::Different;
    return r;
}

} // namespace

Result<ValueDiffResult> compareValues(const CheckpointIndex &a, const CheckpointIndex &b,
                                      const std::vector<TensorPair> &pairs,
                                      const CompareOptions &options)
{
    ValueDiffResult result;
    result.first = a.inputPath;
    result.second = b.inputPath;
    result.rtol = options.rtol;
    result.atol = options.atol;
    result.maxMemory = options.maxMemory;
    Job job{a, b, options};
    job.gpu = options.useGpu && builtWithCuda() && !cudaDevices().empty();
    const int procs = options.comm ? options.comm->size() : 1;
    const int me = options.comm ? options.comm->rank() : 0;
    result.processes = procs;

    std::vector<std::optional<TensorValueDiff>> out(pairs.size());
    std::vector<size_t> mine;
    size_t ordinal = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
        const TensorPair &p = pairs[i];
        if (!p.a || !p.b) {
            TensorValueDiff r;
            r.name = p.name;
            r.state = p.state;
            r.shape = p.shape;
            r.why = p.why;
            r.unreadable = p.unreadable;
            if (p.a) {
                r.dtypeA = p.a->dtype;
                for (const DiffSource &s : p.a->sources)
                    r.keysA.push_back(s.key);
            }
            if (p.b) {
                r.dtypeB = p.b->dtype;
                for (const DiffSource &s : p.b->sources)
                    r.keysB.push_back(s.key);
            }
            out[i] = std::move(r);
            continue;
        }
        if (int(ordinal++ % size_t(procs)) != me)
            continue;
        mine.push_back(i);
        int64_t n = 1;
        for (int64_t d : p.shape)
            n *= d;
        const auto da = dtypeFromName(p.a->dtype), db = dtypeFromName(p.b->dtype);
        job.total +=
            uint64_t(n) * uint64_t((da ? elementSize(*da) : 0) + (db ? elementSize(*db) : 0));
    }

    const int threads = options.threads > 0
                            ? options.threads
                            : int(std::max(1u, std::thread::hardware_concurrency()));
    const int workers = std::clamp(int(mine.size()), 1, threads);
    const int inner = std::max(1, threads / workers);
    const uint64_t budget = std::max<uint64_t>(options.maxMemory / uint64_t(workers), 1 << 20);
    result.threads = threads;
    std::vector<std::optional<Error>> errors(pairs.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
        while (!job.stop) {
            const size_t k = next++;
            if (k >= mine.size())
                return;
            const size_t i = mine[k];
            auto r = comparePair(job, pairs[i], budget, inner);
            if (!r) {
                errors[i] = r.error();
                job.stop = true;
                return;
            }
            out[i] = std::move(*r);
        }
    };
    std::vector<std::thread> pool;
    for (int w = 1; w < workers; ++w)
        pool.emplace_back(work);
    work();
    for (std::thread &th : pool)
        th.join();
    std::optional<Error> failed;
    for (auto &e : errors)
        if (e && !failed)
            failed = *e; // the first pair's error in order: the same whatever the timing
    result.cancelled = failed && failed->code == Error::Code::Cancelled;
    if (failed && !result.cancelled && !options.comm)
        return *failed;

    // Across processes every rank sends what it compared (or why it stopped); all merge.
    uint64_t bytes = job.bytesRead;
    if (options.comm) {
        nlohmann::json mine_ = {{"bytes", bytes},
                                {"error", failed && !result.cancelled ? failed->toString() : ""},
                                {"tensors", nlohmann::json::array()}};
        for (size_t i : mine)
            if (out[i])
                mine_["tensors"].push_back({{"pair", i}, {"diff", tensorValueDiffToJson(*out[i])}});
        auto all = gatherRankResults(*options.comm, mine_);
        if (!all)
            return all.error();
        bytes = 0;
        for (const nlohmann::json &j : *all) {
            bytes += j.value("bytes", uint64_t(0));
            for (const auto &t : j.at("tensors")) {
                const size_t i = t.at("pair").get<size_t>();
                if (i < out.size())
                    out[i] = tensorValueDiffFromJson(t.at("diff"));
            }
        }
    }
    result.bytesRead = bytes;
    for (auto &r : out)
        if (r)
            result.tensors.push_back(std::move(*r));
    return result;
}

} // namespace shardscope::detail
