// SPDX-License-Identifier: MIT
// PyTorch Distributed Checkpoint metadata (.metadata) → CheckpointIndex.
#include "common/regularfile.h"
#include "read/dcpindexer.h"
#include "read/dcpstream.h"
#include "read/mappedfile.h"
#include "read/pickle.h"
#include "read/readers.h"

#include <algorithm>
#include <filesystem>
#include <sys/stat.h>
#include <thread>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

bool classIs(const PickleArena &a, NodeId obj, std::string_view name)
{
    if (obj == kNil || a.kind(obj) != NodeKind::Object)
        return false;
    const NodeId c = a.objClass(obj);
    return c != kNil && a.kind(c) == NodeKind::Global && a.globalName(c) == name;
}

// The decoded Metadata object → the index: what the stream did not take (everything, without
// one), then the small fields.
Status indexMetadata(DcpIndexer &ix, CheckpointIndex &index, const PickleArena &a,
                     DcpStream *stream)
{
    if (stream)
        if (Status st = stream->finish(); !st)
            return st;
    const NodeId root = a.root();
    if (!classIs(a, root, "Metadata") && !classIs(a, root, "MCoreMetadata"))
        return ix.fail(a,
                       "not a DCP Metadata object (found " +
                           (a.kind(root) == NodeKind::Object ? a.className(root)
                                                             : std::string("a plain value")) +
                           ")",
                       root);
    if (classIs(a, root, "MCoreMetadata"))
        index.info["metadata_class"] = "MCoreMetadata";
    const NodeId sdm = a.get(root, "state_dict_metadata");
    if (sdm == kNil || a.kind(sdm) != NodeKind::Dict)
        return ix.fail(a, "Metadata without state_dict_metadata", root);
    NodeId pd = a.get(root, "planner_data");
    if (pd != kNil && a.kind(pd) != NodeKind::Dict)
        pd = kNil;
    const NodeId sd = a.get(root, "storage_data");
    if (sd == kNil || a.kind(sd) != NodeKind::Dict)
        return ix.fail(a, "Metadata without storage_data (not written by FileSystemWriter?)", root);
    DcpIndexer::StorageState plain;
    DcpIndexer::StorageState &storage = stream ? stream->storageState() : plain;
    if (stream) {
        // What the stream took came from dicts on the decoder's stack: they must be the ones
        // the Metadata object ended up with, in the order torch writes them (a hand-made
        // pickle could do otherwise).
        auto replaced = [](NodeId taken, NodeId final) { return taken != kNil && taken != final; };
        if (replaced(stream->entriesDict(), sdm) || replaced(stream->pathsDict(), pd) ||
            replaced(stream->storageDict(), sd))
            return ix.fail(a, "Metadata fields replaced after they were decoded", root);
        if (stream->othersTaken() && a.size(sdm) > 0)
            return ix.fail(a, "state_dict_metadata items after planner_data or storage_data", sdm);
    }
    EntryBatch entries;
    Status st = Ok{};
    a.forEachPair(sdm, [&](NodeId k, NodeId v) {
        if (!st)
            return;
        entries.clear();
        st = ix.extractEntry(a, k, v, entries);
        if (st)
            st = ix.commitEntry(entries.items[0], entries.dims.data());
    });
    if (!st)
        return st;
    if (pd != kNil) {
        PathBatch paths;
        const ArenaValues values{&a};
        a.forEachPair(pd, [&](NodeId k, NodeId v) {
            paths.clear();
            ix.extractPath(a, k, v, paths, false);
            if (!paths.items.empty())
                ix.commitPath(values, paths.items[0], paths.parts.data());
        });
    }
    const ArenaValues values{&a};
    a.forEachPair(sd, [&](NodeId mi, NodeId si) {
        if (st)
            st = ix.commitStorage(values, ix.extractStorage(a, mi, si), a.offsetOf(sd), storage);
    });
    if (!st)
        return st;
    if (NodeId v = a.get(root, "version"); v != kNil) {
        if (a.isStr(v))
            index.info["dcp_version"] = std::string(a.bytes(v));
        else if (a.kind(v) == NodeKind::Float)
            index.info["dcp_version"] = std::to_string(a.real(v));
    }
    if (NodeId sm = a.get(root, "storage_meta"); sm != kNil && a.kind(sm) == NodeKind::Object) {
        if (NodeId id = a.get(sm, "save_id"); id != kNil && a.isStr(id))
            index.info["save_id"] = std::string(a.bytes(id));
        if (NodeId cp = a.get(sm, "checkpoint_id"); cp != kNil) {
            if (a.isStr(cp)) {
                index.info["saved_as"] = std::string(a.bytes(cp));
            } else if (a.kind(cp) == NodeKind::Object) { // pathlib.PosixPath('/', 'a', …)
                std::string p;
                for (NodeId part : a.items(a.objArgs(cp)))
                    if (a.isStr(part)) {
                        std::string s(a.bytes(part));
                        p += (p.empty() || p.back() == '/') ? s : "/" + s;
                    }
                index.info["saved_as"] = p;
            }
        }
    }
    if (a.get(root, "mcore_data") != kNil)
        index.info["mcore_data"] = "present";
    return Ok{};
}

} // namespace

std::vector<std::string> listDcpMetadata(const std::string &dir)
{
    std::vector<std::string> metas;
    if (fs::exists(fs::path(dir) / ".metadata"))
        return {".metadata"};
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.starts_with("__") && n.ends_with(".metadata"))
            metas.push_back(n);
    }
    std::sort(metas.begin(), metas.end());
    return metas;
}

Status readDcp(const std::string &dir, CheckpointIndex &index, bool streamItems,
               const std::function<void(const CheckpointIndex &)> &onKeysKnown,
               HotVector<char> *spare)
{
    const std::vector<std::string> metas = listDcpMetadata(dir);
    if (metas.size() > 1 || (metas.size() == 1 && metas.front() != ".metadata"))
        index.info["rank_local_metadata"] = std::to_string(metas.size());
    if (metas.empty())
        return makeError(Error::Code::NotFound, "no .metadata file").inFile(dir);

    DcpIndexer indexer(index);
    {
        // A key takes a few hundred bytes of metadata (its entry, its path, its chunks'
        // storage records), mostly more: reserve for one per 400 bytes, capped.
        uint64_t bytes = 0;
        std::error_code ec;
        for (const std::string &m : metas)
            if (const uintmax_t n = fs::file_size(fs::path(dir) / m, ec); !ec)
                bytes += n;
        indexer.reserve(size_t(std::min<uint64_t>(bytes / 400, uint64_t(1) << 22)));
    }
    // Entries' views (and the stream's, until finished) point into the mapped files.
    std::vector<std::shared_ptr<const MappedFile>> keepMapped;
    for (const std::string &m : metas) {
        const std::string path = (fs::path(dir) / m).string();
        auto file = MappedFile::open(path, true);
        if (!file)
            return file.error();
        if ((*file)->size() == 0)
            return makeError(Error::Code::Format, "empty metadata file").inFile(path);
        keepMapped.push_back(*file);
        indexer.startFile(path);
        DcpStream stream(indexer);
        // Rank-local files each describe part of the keys: none of them gives all.
        if (onKeysKnown && metas.size() == 1)
            stream.onKeysKnown([&] { onKeysKnown(index); });
        PickleLimits limits;
        limits.keepMemo = spare != nullptr;
        if (streamItems) {
            limits.dictSink = &stream;
            // With two cores the committing thread has the other one: a prefaulting thread
            // would take its time, and the committing, not the decoding, would finish last.
            if (const unsigned cores = std::thread::hardware_concurrency(); cores && cores < 3)
                limits.prefaultFrom = SIZE_MAX;
        }
        auto arena = parsePickle((*file)->bytes(), 0, limits);
        if (!arena) {
            // What the file is not comes first: a .metadata that is no pickle at all (every
            // protocol torch writes starts with PROTO, 0x80) is no DCP checkpoint's.
            if ((*file)->bytes()[0] != 0x80)
                arena.error().message = "not DCP metadata (torch.distributed.checkpoint writes a "
                                        "pickle, starting with byte 0x80): " +
                                        arena.error().message;
            return arena.error().inFile(path);
        }
        Status st = indexMetadata(indexer, index, *arena, streamItems ? &stream : nullptr);
        if (!st)
            return st;
        if (spare) // the biggest of the files' memos
            if (HotVector<char> memo = arena->takeSpare(); memo.capacity() > spare->capacity())
                *spare = std::move(memo);
    }
    // What torch's unpickler will meet (shardscope/torchcompat.h).
    std::string forms;
    for (const auto &[bit, name] : {std::pair{DcpIndexer::kPropertiesFive, "5 fields"},
                                    {DcpIndexer::kPropertiesSix, "6 fields"},
                                    {DcpIndexer::kPropertiesDict, "a dict"},
                                    {DcpIndexer::kPropertiesOther, "a tuple of another length"}})
        if (indexer.propertyForms() & bit)
            forms += (forms.empty() ? "" : ", ") + std::string(name);
    if (!forms.empty())
        index.info["tensor_properties"] = forms;
    // Every chunk must have been given a place by storage_data (a scan of 1.75 M chunks for a
    // big file: skipped when the indexer placed as many as it made).
    if (indexer.allPlaced())
        return Ok{};
    for (TensorEntry &t : index.tensors) {
        size_t missing = 0;
        for (const Location &l : t.chunks)
            missing += l.file == kUnassigned;
        if (missing)
            index.problems.push_back({t.key.str(),
                                      (fs::path(dir) / metas.front()).string(),
                                      {},
                                      std::to_string(missing) + " of " +
                                          std::to_string(t.chunks.size()) +
                                          " chunks have no storage entry",
                                      Problem::Effect::Unreadable});
    }
    for (ObjectEntry &o : index.objects)
        if (!o.location)
            index.problems.push_back({o.key.str(),
                                      (fs::path(dir) / metas.front()).string(),
                                      {},
                                      "object has no storage entry",
                                      Problem::Effect::Unreadable});
    return Ok{};
}

uint32_t internFile(CheckpointIndex &index, const std::string &relativePath)
{
    for (size_t i = 0; i < index.files.size(); ++i)
        if (index.files[i] == relativePath)
            return uint32_t(i);
    index.files.push_back(relativePath);
    return uint32_t(index.files.size() - 1);
}

uint16_t internTransforms(CheckpointIndex &index, std::vector<std::string> chain)
{
    for (size_t i = 0; i < index.transformChains.size(); ++i)
        if (index.transformChains[i] == chain)
            return uint16_t(i);
    if (index.transformChains.size() >= UINT16_MAX)
        return 0;
    index.transformChains.push_back(std::move(chain));
    return uint16_t(index.transformChains.size() - 1);
}

void statFiles(CheckpointIndex &index)
{
    index.fileSizes.assign(index.files.size(), UINT64_MAX);
    index.fileKinds.assign(index.files.size(), {});
    for (size_t i = 0; i < index.files.size(); ++i) {
        struct stat st
        {
        };
        const std::string path = (fs::path(index.dataDir) / index.files[i]).string();
        if (::stat(path.c_str(), &st) != 0)
            continue;
        index.fileKinds[i] = fileKindName(st.st_mode);
        if (index.fileKinds[i].empty())
            index.fileSizes[i] = uint64_t(st.st_size);
    }
}

} // namespace shardscope::detail
