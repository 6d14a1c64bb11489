// SPDX-License-Identifier: MIT
#include "inspectcommand.h"

#include "keytree.h"

#include <shardscope/checkpoint.h>
#include <shardscope/health.h>
#include <shardscope/tensor.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fnmatch.h>
#include <iostream>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;

namespace shardscope::cli {

namespace {

std::string shapeText(const std::vector<int64_t> &shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string bytesText(uint64_t b)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

json number(double v)
{
    return std::isfinite(v) ? json(v) : json(nullptr);
}

bool selected(const InspectOptions &o, const std::string &key)
{
    if (o.tensor)
        return key == *o.tensor;
    if (o.filters.empty())
        return true;
    for (const std::string &f : o.filters)
        if (fnmatch(f.c_str(), key.c_str(), 0) == 0)
            return true;
    return false;
}

json statsJson(const TensorStats &s)
{
    return {{"count", s.count},        {"finite", s.finite},      {"nan", s.nanCount},
            {"posinf", s.posInfCount}, {"neginf", s.negInfCount}, {"min", number(s.min)},
            {"max", number(s.max)},    {"mean", number(s.mean)},  {"std", number(s.std)},
            {"l2", number(s.l2)}};
}

json problemJson(const Problem &p)
{
    json j = {
        {"key", p.key}, {"file", p.file}, {"message", p.message}, {"effect", effectName(p.effect)}};
    j["offset"] = p.offset ? json(*p.offset) : json(nullptr);
    return j;
}

struct TensorResult
{
    const TensorEntry *entry;
    std::optional<TensorStats> stats;
    std::optional<TensorHealth> health;
    std::string sha256;
};

} // namespace

int runInspect(const InspectOptions &o)
{
    auto opened = openCheckpoint(o.path);
    if (!opened) {
        std::cerr << "shardscope-cli: " << opened.error().toString() << "\n";
        return ExitUnreadable;
    }
    const CheckpointIndex &index = *opened;
    std::vector<Problem> problems = index.problems;

    std::vector<TensorResult> tensors;
    for (const TensorEntry &t : index.tensors)
        if (selected(o, t.key))
            tensors.push_back({&t, std::nullopt, {}});
    if (o.tensor && tensors.empty() && !index.findObject(*o.tensor)) {
        std::cerr << "shardscope-cli: " << o.path << ": key '" << *o.tensor
                  << "': no such tensor\n";
        return ExitUnreadable;
    }
    const bool readData = o.stats || o.hash;
    for (TensorResult &r : tensors) {
        if (!readData)
            break;
        auto data = readTensor(index, *r.entry);
        if (!data) {
            Error e = data.error();
            e.atKey(r.entry->key);
            problems.push_back({e.key, e.file, e.offset, e.message, Problem::Effect::Unreadable});
            continue;
        }
        if (o.hash)
            r.sha256 = sha256Hex(*data);
        if (o.stats) {
            // Our own health kernels (shared with the CUDA path); complex values through libtorch.
            if (auto h = computeHealth(*data)) {
                TensorStats s;
                s.count = h->count;
                s.finite = h->finite;
                s.nanCount = h->nanCount;
                s.posInfCount = h->posInfCount;
                s.negInfCount = h->negInfCount;
                s.min = h->min;
                s.max = h->max;
                s.mean = h->mean;
                s.std = h->std;
                s.l2 = h->l2;
                if (h->finite == 0) // no finite values: no moments (null in JSON)
                    s.min = s.max = s.mean = s.std = std::nan("");
                r.stats = s;
                r.health = std::move(*h);
            } else if (auto s = computeStats(*data)) {
                r.stats = *s;
            }
        }
    }

    std::vector<std::pair<const ObjectEntry *, std::string>> objects;
    for (const ObjectEntry &ob : index.objects) {
        if (!selected(o, ob.key))
            continue;
        std::string summary;
        if (o.objects || (o.tensor && ob.key == *o.tensor)) {
            auto v = readObject(index, ob);
            if (v) {
                summary = v->summary(120);
            } else {
                Error e = v.error();
                e.atKey(ob.key);
                problems.push_back(
                    {e.key, e.file, e.offset, e.message, Problem::Effect::Unreadable});
            }
        }
        objects.emplace_back(&ob, std::move(summary));
    }

    if (o.json) {
        json j;
        j["schema"] = "shardscope.inspect/1";
        j["path"] = o.path;
        j["format"] = std::string(formatName(index.format));
        j["data_dir"] = index.dataDir;
        j["info"] = index.info;
        json files = json::array();
        for (size_t i = 0; i < index.files.size(); ++i)
            files.push_back(
                {{"path", index.files[i]},
                 {"size",
                  index.fileSizes[i] == UINT64_MAX ? json(nullptr) : json(index.fileSizes[i])}});
        j["files"] = std::move(files);
        json ts = json::array();
        for (const TensorResult &r : tensors) {
            const TensorEntry &t = *r.entry;
            json chunks = json::array();
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                const Location &l = t.chunks[c];
                const bool placed = l.file < index.files.size();
                json cj = {
                    {"offsets",
                     std::vector<int64_t>(t.chunkOffsets(c).begin(), t.chunkOffsets(c).end())},
                    {"sizes", std::vector<int64_t>(t.chunkSizes(c).begin(), t.chunkSizes(c).end())},
                    {"file", placed ? json(index.files[l.file]) : json(nullptr)},
                    {"offset", l.offset},
                    {"length", l.length}};
                if (l.transforms)
                    cj["transforms"] = index.transformChains[l.transforms];
                chunks.push_back(std::move(cj));
            }
            json tj = {{"key", t.key},       {"dtype", t.dtypeName}, {"shape", t.shape},
                       {"numel", t.numel()}, {"nbytes", t.nbytes()}, {"chunks", std::move(chunks)}};
            if (!t.path.splitsEveryDot())
                tj["path"] = t.path.parts(t.key);
            if (!r.sha256.empty())
                tj["sha256"] = r.sha256;
            if (r.stats)
                tj["stats"] = statsJson(*r.stats);
            if (r.health) {
                tj["stats"]["denormal"] = r.health->denormalCount;
                tj["stats"]["histogram"] = r.health->histogram;
                char fp[17];
                std::snprintf(fp, sizeof fp, "%016llx",
                              static_cast<unsigned long long>(r.health->fingerprint));
                tj["stats"]["fingerprint"] = fp;
            }
            ts.push_back(std::move(tj));
        }
        j["tensors"] = std::move(ts);
        json os = json::array();
        for (const auto &[ob, summary] : objects) {
            json oj = {{"key", ob->key}};
            if (!ob->path.splitsEveryDot())
                oj["path"] = ob->path.parts(ob->key);
            if (ob->location && ob->location->file < index.files.size()) {
                oj["file"] = index.files[ob->location->file];
                oj["offset"] = ob->location->offset;
                oj["length"] = ob->location->length;
            }
            if (!summary.empty())
                oj["value"] = summary;
            os.push_back(std::move(oj));
        }
        j["objects"] = std::move(os);
        json ps = json::array();
        for (const Problem &p : problems)
            ps.push_back(problemJson(p));
        j["problems"] = std::move(ps);
        j["healthy"] = problems.empty();
        std::cout << j.dump(1) << "\n";
    } else {
        uint64_t bytes = 0, chunks = 0;
        for (const TensorEntry &t : index.tensors) {
            bytes += t.nbytes();
            chunks += t.chunks.size();
        }
        std::cout << index.inputPath << "\n  format: " << formatName(index.format);
        if (auto it = index.info.find("iteration"); it != index.info.end())
            std::cout << ", iteration " << it->second;
        std::cout << "\n  " << index.tensors.size() << " tensors (" << bytesText(bytes) << ") in "
                  << chunks << " chunks across " << index.files.size() << " files; "
                  << index.objects.size() << " objects\n";
        if (index.dataDir != index.inputPath && index.dataDir != ".")
            std::cout << "  data: " << index.dataDir << "\n";
        std::cout << "\n";
        KeyTree tree;
        for (const TensorResult &r : tensors) {
            const TensorEntry &t = *r.entry;
            std::string summary =
                t.chunks.size() == 1 ? std::string() : std::to_string(t.chunks.size()) + " chunks";
            if (!r.sha256.empty())
                summary += (summary.empty() ? "" : "  ") + ("sha256 " + r.sha256.substr(0, 16));
            tree.add(t.key, t.dtypeName + " " + shapeText(t.shape), summary);
        }
        for (const auto &[ob, summary] : objects)
            tree.add(ob->key, "object", summary);
        if (o.collapse && !o.tensor)
            tree.collapse();
        std::cout << tree.render();
        if (o.tensor) {
            for (const TensorResult &r : tensors) {
                const TensorEntry &t = *r.entry;
                std::cout << "\n"
                          << t.key << "\n  dtype " << t.dtypeName << ", shape "
                          << shapeText(t.shape) << ", " << bytesText(t.nbytes()) << "\n";
                for (size_t c = 0; c < t.chunks.size(); ++c) {
                    const Location &l = t.chunks[c];
                    std::cout << "  chunk " << c << ": offsets "
                              << shapeText({t.chunkOffsets(c).begin(), t.chunkOffsets(c).end()})
                              << " sizes "
                              << shapeText({t.chunkSizes(c).begin(), t.chunkSizes(c).end()}) << "  "
                              << (l.file < index.files.size() ? index.files[l.file] : "?") << " @"
                              << l.offset << " +" << l.length << "\n";
                }
                if (r.stats) {
                    const TensorStats &s = *r.stats;
                    std::printf("  min %.9g  max %.9g  mean %.9g  std %.9g  l2 %.9g\n", s.min,
                                s.max, s.mean, s.std, s.l2);
                    std::printf("  %lld elements: %lld finite, %lld NaN, %lld +Inf, %lld -Inf\n",
                                (long long)s.count, (long long)s.finite, (long long)s.nanCount,
                                (long long)s.posInfCount, (long long)s.negInfCount);
                    std::fflush(stdout);
                }
                if (!r.sha256.empty())
                    std::cout << "  sha256 " << r.sha256 << "\n";
            }
        }
    }
    std::cout.flush();
    for (const Problem &p : problems)
        std::cerr << "problem: " << p.toString() << "\n";
    return problems.empty() ? ExitHealthy : ExitProblems;
}

} // namespace shardscope::cli
