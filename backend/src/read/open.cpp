// SPDX-License-Identifier: MIT
// Format detection and Megatron checkpoint roots: openCheckpoint() and checkIntegrity().
#include "read/contentmetadata.h"
#include "read/indexcache.h"
#include "read/mappedfile.h"
#include "read/readers.h"
#include "read/safetensors_magic.h"
#include "shardscope/fix.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

namespace fs = std::filesystem;

namespace shardscope {

using namespace detail;

namespace {

bool isFsdpDtensorLayout(const CheckpointIndex &index)
{
    bool model = false, optim = false;
    for (const TensorEntry &t : index.tensors) {
        model = model || t.key.starts_with("model.module.");
        optim = optim || t.key.starts_with("optimizer.state.");
    }
    for (const ObjectEntry &o : index.objects)
        optim = optim || o.key.starts_with("optimizer.param_to_group_meta.");
    return model && optim;
}

Status openDcpLike(const fs::path &dir, CheckpointIndex &index, const OpenOptions &options)
{
    index.dataDir = dir.string();
    index.format = Format::Dcp;
    const fs::path metaJson = dir / "metadata.json";
    if (fs::exists(metaJson)) {
        auto text = readTextFile(metaJson.string());
        if (!text)
            return text.error();
        auto j = nlohmann::json::parse(*text, nullptr, false);
        if (!j.is_discarded() && j.is_object() && j.contains("sharded_backend")) {
            index.format = Format::MegatronTorchDist;
            for (auto it = j.begin(); it != j.end(); ++it)
                index.info["megatron." + it.key()] =
                    it->is_string() ? it->get<std::string>() : it->dump();
            if (j["sharded_backend"] != "torch_dist")
                return makeError(Error::Code::Unsupported,
                                 "Megatron sharded backend " + j["sharded_backend"].dump())
                    .inFile(metaJson.string());
        }
    }
    // torch_dist's common.pt adds keys after the metadata: no point knows them all early.
    const bool commonPt =
        index.format == Format::MegatronTorchDist && fs::exists(dir / "common.pt");
    const auto onKeysKnown =
        commonPt ? std::function<void(const CheckpointIndex &)>() : options.onKeysKnown;
    Status st = options.useCache ? readDcpCached(index.dataDir, index, options.threads, onKeysKnown)
                                 : readDcp(index.dataDir, index, options.threads != 1, onKeysKnown);
    if (!st)
        return st;
    if (commonPt) {
        st = readTorchSave(index.dataDir, "common.pt", "common.pt/", index);
        if (!st)
            return st;
    }
    if (index.format == Format::MegatronTorchDist)
        noteContentMetadata(index);
    resolveSafetensorsItems(index);
    refineDcpFormat(index);
    return Ok{};
}

Status openLegacy(const fs::path &dir, CheckpointIndex &index)
{
    index.format = Format::MegatronLegacy;
    index.dataDir = dir.string();
    std::vector<std::string> ranks;
    for (const auto &e : fs::directory_iterator(dir))
        if (e.is_directory() && e.path().filename().string().starts_with("mp_rank_"))
            ranks.push_back(e.path().filename().string());
    std::sort(ranks.begin(), ranks.end());
    for (const std::string &r : ranks) {
        for (const char *name : {"model_optim_rng.pt", "model_rng.pt"}) {
            if (!fs::exists(dir / r / name))
                continue;
            Status st = readTorchSave(index.dataDir, r + "/" + name, r + "/", index);
            if (!st)
                return st;
        }
        if (fs::exists(dir / r / "distrib_optim.pt"))
            index.info["distrib_optim." + r] = "present (layout not decoded)";
    }
    index.info["tp_pp_ep_files"] = std::to_string(ranks.size());
    return Ok{};
}

Status openDirectory(const fs::path &dir, CheckpointIndex &index, const OpenOptions &options)
{
    const fs::path tracker = dir / "latest_checkpointed_iteration.txt";
    if (fs::exists(tracker)) {
        auto text = readTextFile(tracker.string(), 4096);
        if (!text)
            return text.error();
        std::string s = *text;
        s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }),
                s.end());
        fs::path iterDir;
        if (s == "release") {
            iterDir = dir / "release";
        } else if (!s.empty() && s.size() <= 12 &&
                   std::all_of(s.begin(), s.end(),
                               [](unsigned char c) { return std::isdigit(c); })) {
            char name[32];
            std::snprintf(name, sizeof name, "iter_%07llu", std::stoull(s));
            iterDir = dir / name;
        } else {
            return makeError(Error::Code::Format, "tracker holds '" + s.substr(0, 40) +
                                                      "', not an iteration or 'release'")
                .inFile(tracker.string());
        }
        index.info["iteration"] = s;
        index.info["megatron_root"] = dir.string();
        if (!fs::is_directory(iterDir))
            return makeError(Error::Code::NotFound, "tracker names iteration " + s + " but " +
                                                        iterDir.string() + " does not exist")
                .inFile(tracker.string());
        return openDirectory(iterDir, index, options);
    }
    bool hasMpRank = false, hasMeta = false, hasStIndex = false, hasPtIndex = false;
    std::vector<std::string> safetensorFiles;
    for (const auto &e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        hasMpRank = hasMpRank || n.starts_with("mp_rank_0");
        hasMeta = hasMeta || n == ".metadata" || (n.starts_with("__") && n.ends_with(".metadata"));
        hasStIndex = hasStIndex || n == "model.safetensors.index.json";
        hasPtIndex = hasPtIndex || n == "pytorch_model.bin.index.json";
        if (n.ends_with(".safetensors"))
            safetensorFiles.push_back(n);
    }
    if (fs::exists(dir / "metadata.json") || hasMeta)
        return openDcpLike(dir, index, options);
    if (hasMpRank)
        return openLegacy(dir, index);
    if (hasStIndex || hasPtIndex) {
        index.format = Format::SafetensorsIndex;
        index.dataDir = dir.string();
        return readSafetensorsIndex(
            (dir / (hasStIndex ? "model.safetensors.index.json" : "pytorch_model.bin.index.json"))
                .string(),
            index);
    }
    // Without an index, what torch's HuggingFaceStorageReader reads: every file, each tensor a
    // chunk where its DCP_SHARDING_INFO puts it (HuggingFaceStorageWriter's distributed save).
    if (safetensorFiles.size() > 1 ||
        (safetensorFiles.size() == 1 && hasDcpShardingInfo((dir / safetensorFiles[0]).string())))
        return readHfStorage(dir.string(), safetensorFiles, index);
    if (safetensorFiles.size() == 1) {
        index.format = Format::Safetensors;
        index.dataDir = dir.string();
        return readSafetensors(index.dataDir, safetensorFiles.front(), index);
    }
    return makeError(Error::Code::NotFound,
                     "no checkpoint here (no .metadata, metadata.json, mp_rank_*, "
                     "latest_checkpointed_iteration.txt or safetensors)")
        .inFile(dir.string());
}

Status openFile(const fs::path &file, CheckpointIndex &index, const OpenOptions &options)
{
    index.dataDir = file.parent_path().string();
    if (index.dataDir.empty())
        index.dataDir = ".";
    const std::string name = file.filename().string();
    if (name == ".metadata" || (name.starts_with("__") && name.ends_with(".metadata")))
        return openDcpLike(file.parent_path().empty() ? fs::path(".") : file.parent_path(), index,
                           options);
    if (name.ends_with(".index.json")) {
        index.format = Format::SafetensorsIndex;
        return readSafetensorsIndex(file.string(), index);
    }
    auto mf = MappedFile::open(file.string());
    if (!mf)
        return mf.error();
    auto head = (*mf)->bytes().first(std::min<uint64_t>((*mf)->size(), 16));
    if (head.size() >= 4 && head[0] == 'P' && head[1] == 'K') {
        index.format = Format::TorchSave;
        return readTorchSave(index.dataDir, name, "", index);
    }
    if (looksLikeSafetensors((*mf)->bytes()) || name.ends_with(".safetensors")) {
        if (hasDcpShardingInfo(file.string())) // one shard of a HuggingFaceStorageWriter save
            return readHfStorage(index.dataDir, {name}, index);
        index.format = Format::Safetensors;
        return readSafetensors(index.dataDir, name, index);
    }
    // The legacy stream: a pickle (PROTO). After safetensors, whose header length can start
    // with 0x80 as well.
    if (head.size() >= 2 && head[0] == 0x80) {
        index.format = Format::TorchSave;
        return readTorchSave(index.dataDir, name, "", index);
    }
    // torch < 0.4 saved a tar of sys_info, pickle, storages and tensors (torch.load still reads
    // it, with weights_only=False).
    if (auto all = (*mf)->bytes();
        all.size() >= 263 && std::memcmp(all.data() + 257, "ustar", 5) == 0) {
        index.format = Format::TorchSave;
        return readTorchSave(index.dataDir, name, "", index);
    }
    return makeError(Error::Code::Format,
                     "not a recognised checkpoint file (not a zip, pickle or safetensors)")
        .inFile(file.string())
        .atOffset(0);
}

// A checkpoint `fix` wrote says so at its top: where it was repaired from.
void noteRepair(CheckpointIndex &index)
{
    auto it = index.info.find("megatron_root");
    const fs::path top = it != index.info.end() ? fs::path(it->second) : fs::path(index.dataDir);
    std::error_code ec;
    if (!fs::is_regular_file(top / kFixManifest, ec))
        return;
    auto text = readTextFile((top / kFixManifest).string());
    if (!text)
        return;
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object() && j.value("schema", "") == "shardscope.fix/1" && j.contains("source") &&
        j["source"].is_string())
        index.info["repaired_from"] = j["source"].get<std::string>();
}

} // namespace

void detail::refineDcpFormat(CheckpointIndex &index)
{
    if (index.format == Format::MegatronFsdpDtensor && !isFsdpDtensorLayout(index))
        index.format = Format::Dcp;
    else if (index.format == Format::Dcp && isFsdpDtensorLayout(index))
        index.format = Format::MegatronFsdpDtensor;
}

Result<CheckpointIndex> openCheckpoint(const std::string &path, const OpenOptions &options)
{
    CheckpointIndex index;
    index.inputPath = path;
    std::error_code ec;
    const fs::file_status s = fs::status(path, ec);
    if (ec || !fs::exists(s))
        return makeError(Error::Code::NotFound, "no such file or directory").inFile(path);
    Status st = Ok{};
    try {
        st = fs::is_directory(s) ? openDirectory(fs::path(path), index, options)
                                 : openFile(fs::path(path), index, options);
    } catch (const std::exception &e) {
        // Only the file system and allocation throw here; report them like any other error.
        return makeError(Error::Code::Io, e.what()).inFile(path);
    }
    if (!st)
        return st.error();
    statFiles(index);
    noteRepair(index);
    if (options.checkIntegrity) {
        std::vector<FileEnds> ends;
        auto more = detail::checkIntegrity(index, &ends);
        index.problems.insert(index.problems.end(), more.begin(), more.end());
        // Then what the bytes are: a file zeroed or replaced keeps its size.
        std::string checked;
        auto damaged = detail::checkItems(index, options.checkEveryItem, &checked, &ends);
        if (checked != "every item (0)")
            index.info["item_check"] = checked;
        index.problems.insert(index.problems.end(), std::make_move_iterator(damaged.begin()),
                              std::make_move_iterator(damaged.end()));
    }
    return index;
}

std::vector<Problem> checkIntegrity(const CheckpointIndex &index)
{
    return detail::checkIntegrity(index, nullptr);
}

std::vector<Problem> detail::checkIntegrity(const CheckpointIndex &index,
                                            std::vector<FileEnds> *ends)
{
    auto fileSize = [&](uint32_t f) {
        return f < index.fileSizes.size() ? index.fileSizes[f] : UINT64_MAX;
    };
    auto check = [&](std::string_view key, const Location &l, std::vector<Problem> &out) -> bool {
        if (l.file == kUnassigned)
            return true; // reported when the metadata was read
        const uint64_t size = fileSize(l.file);
        if (size != UINT64_MAX && l.offset <= size && l.length <= size - l.offset)
            return true; // the common case: no path built for 1.7 M good chunks
        const std::string path = (fs::path(index.dataDir) / index.files[l.file]).string();
        if (size == UINT64_MAX) {
            const bool there = l.file < index.fileKinds.size() && !index.fileKinds[l.file].empty();
            out.push_back({std::string(key),
                           path,
                           {},
                           there ? "data file is " + index.fileKinds[l.file] +
                                       ", not a regular file: refused unread"
                                 : std::string("data file is missing"),
                           Problem::Effect::Unreadable});
            return false;
        }
        if (l.offset > size || l.length > size - l.offset) {
            out.push_back({std::string(key), path, l.offset,
                           "item [" + std::to_string(l.offset) + ", +" + std::to_string(l.length) +
                               ") runs past the end of the " + std::to_string(size) + "-byte file",
                           Problem::Effect::Unreadable});
            return false;
        }
        return true;
    };
    // The item check's (itemcheck.cpp) candidates, met on the way: what it samples by.
    auto note = [&](std::vector<FileEnds> *into, uint32_t entry, uint32_t chunk,
                    const Location &l) {
        if (into && l.encoding == Encoding::TorchSaveArchive)
            (*into)[l.file].take(entry, chunk, l.offset);
    };
    auto checkTensor = [&](uint32_t e, std::vector<Problem> &out, std::vector<FileEnds> *into) {
        const TensorEntry &t = index.tensors[e];
        // Chunks must lie inside the tensor and cover it exactly (by volume). An empty chunk's
        // item torch never reads.
        unsigned __int128 covered = 0;
        bool inside = true, broken = false;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            unsigned __int128 vol = 1;
            for (size_t d = 0; d < t.ndim(); ++d) {
                const int64_t o = t.chunkOffsets(c)[d], s = t.chunkSizes(c)[d];
                if (o < 0 || s < 0 || o > t.shape[d] ||
                    s > t.shape[d] - o) // no o + s: it may overflow
                    inside = false;
                vol *= uint64_t(std::max<int64_t>(s, 0));
            }
            covered += vol;
            const Location &l = t.chunks[c];
            if (vol == 0 || l.file == kUnassigned)
                continue;
            const uint64_t size = fileSize(l.file);
            if (size != UINT64_MAX && l.offset <= size && l.length <= size - l.offset)
                note(into, e, uint32_t(c), l);
            else if (!broken)
                broken = !check(t.key, l, out); // one line per broken key
        }
        if (!inside)
            out.push_back({t.key.str(),
                           {},
                           {},
                           "a chunk lies outside the tensor's global shape",
                           Problem::Effect::Holes});
        else if (covered != (unsigned __int128)uint64_t(t.numel()) && t.numel() > 0)
            out.push_back({t.key.str(),
                           {},
                           {},
                           "chunks cover " + std::to_string(uint64_t(covered)) + " of " +
                               std::to_string(t.numel()) + " elements",
                           Problem::Effect::Holes});
    };
    // Two halves of the tensors on two threads (1.75 M chunks: a tenth of a second on one),
    // their problems joined in entry order: the same list either way.
    const size_t half = index.chunkCount() > (1u << 18) ? index.tensors.size() / 2 : 0;
    std::vector<Problem> out, second;
    std::vector<FileEnds> secondEnds;
    if (ends) {
        ends->assign(index.files.size(), {});
        secondEnds.resize(half ? index.files.size() : 0);
    }
    std::thread other;
    if (half)
        other = std::thread([&] {
            for (size_t i = half; i < index.tensors.size(); ++i)
                checkTensor(uint32_t(i), second, ends ? &secondEnds : nullptr);
        });
    for (size_t i = 0; i < (half ? half : index.tensors.size()); ++i)
        checkTensor(uint32_t(i), out, ends);
    if (other.joinable())
        other.join();
    out.insert(out.end(), std::make_move_iterator(second.begin()),
               std::make_move_iterator(second.end()));
    for (size_t f = 0; f < secondEnds.size(); ++f)
        (*ends)[f].merge(secondEnds[f]);
    const uint32_t tensors = uint32_t(index.tensors.size());
    for (uint32_t o = 0; o < index.objects.size(); ++o)
        if (const auto &l = index.objects[o].location; l && check(index.objects[o].key, *l, out))
            if (l->file != kUnassigned)
                note(ends, tensors + o, 0, *l);
    return out;
}

} // namespace shardscope
