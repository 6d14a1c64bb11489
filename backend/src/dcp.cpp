// SPDX-License-Identifier: MIT
// PyTorch Distributed Checkpoint metadata (.metadata) → CheckpointIndex.
#include "flatmap.h"
#include "mappedfile.h"
#include "pickle.h"
#include "readers.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <thread>
#include <unordered_map>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

struct DcpBuilder
{
    CheckpointIndex &index;
    const PickleArena *a = nullptr;
    std::string metaFile;
    // Key → tensor index, or object index | kObjectBit. Views point into the mapped metadata
    // files, which readDcp keeps open until the index is complete.
    static constexpr uint32_t kObjectBit = 0x80000000u;
    FlatStringMap byKey{1 << 16};
    std::vector<int64_t> scratch;
    // Memoised key strings and classes, see PickleArena::get(v, key, seen).
    struct Seen
    {
        NodeId offsets = kNil, sizes = kNil, fqn = kNil, offset = kNil, index = kNil,
               relativePath = kNil, length = kNil, transforms = kNil, properties = kNil,
               size = kNil, chunks = kNil, tensorClass = kNil, bytesClass = kNil;
    } seen;
    NodeId get(NodeId v, std::string_view key, NodeId &s) const { return a->get(v, key, s); }

    // Keys in state_dict_metadata order (tensor index, or object index | kObjectBit).
    std::vector<uint32_t> order;
    const std::string &keyOf(uint32_t e) const
    {
        return (e & kObjectBit) ? index.objects[e & ~kObjectBit].key : index.tensors[e].key;
    }
    // planner_data and each rank's storage entries mostly follow state_dict_metadata's order:
    // try the entry after the previous hit before hashing the (long) key.
    uint32_t lookup(NodeId keyValue, std::string_view key, size_t &cursor) const
    {
        // The coordinator's own keys are the very string objects of state_dict_metadata, so
        // pickle wrote a memo reference: the same value, no hashing needed.
        for (size_t c : {cursor, cursor + 1})
            if (c < order.size() && orderValue[c] == keyValue && orderFile[c] == fileNo) {
                cursor = c;
                return order[c];
            }
        const XXH128_hash_t h = FlatStringMap::hash(key);
        for (size_t c : {cursor, cursor + 1})
            if (c < order.size() && XXH128_isEqual(orderHash[c], h) &&
                orderLength[c] == key.size()) {
                cursor = c;
                return order[c];
            }
        const uint32_t found = byKey.find(key.size(), h);
        if (found != FlatStringMap::kAbsent)
            cursor = positionOf(found);
        return found;
    }
    std::vector<XXH128_hash_t> orderHash; // keys as FlatStringMap identifies them
    std::vector<uint32_t> orderLength;
    std::vector<NodeId> orderValue;  // the key as a pickle value (see lookup)
    std::vector<uint32_t> orderFile; // …of which metadata file (values are per arena)
    uint32_t fileNo = 0;
    void appendOrder(uint32_t entry, NodeId keyValue, std::string_view key, const XXH128_hash_t &h)
    {
        order.push_back(entry);
        orderValue.push_back(keyValue);
        orderFile.push_back(fileNo);
        orderHash.push_back(h);
        orderLength.push_back(uint32_t(key.size()));
    }
    std::vector<uint32_t> tensorPos, objectPos; // entry → position in `order`
    size_t positionOf(uint32_t e) const
    {
        return (e & kObjectBit) ? objectPos[e & ~kObjectBit] : tensorPos[e];
    }

    Error fail(std::string msg, NodeId at, const std::string &key = {}) const
    {
        Error e = makeError(Error::Code::Format, std::move(msg)).inFile(metaFile);
        if (at != kNil)
            e.atOffset(a->offsetOf(at));
        if (!key.empty())
            e.atKey(key);
        return e;
    }

    bool classIs(NodeId obj, std::string_view suffix) const
    {
        if (obj == kNil || a->kind(obj) != NodeKind::Object)
            return false;
        NodeId c = a->objClass(obj);
        return c != kNil && a->kind(c) == NodeKind::Global && a->globalName(c) == suffix;
    }

    bool isClass(NodeId obj, std::string_view name, NodeId &s) const
    {
        if (obj == kNil || a->kind(obj) != NodeKind::Object)
            return false;
        const NodeId c = a->objClass(obj);
        if (c == s && s != kNil)
            return true;
        if (!classIs(obj, name))
            return false;
        s = c;
        return true;
    }

    Result<std::vector<int64_t>> ints(NodeId n, const std::string &key, const char *what) const
    {
        auto v = a->intTuple(n);
        if (!v)
            return fail(std::string(what) + " is not a tuple of ints", n, key);
        return v;
    }

    Status tensorEntry(std::string_view keyView, const XXH128_hash_t &h, NodeId tsm)
    {
        NodeId props = get(tsm, "properties", seen.properties);
        NodeId size = get(tsm, "size", seen.size);
        NodeId chunks = get(tsm, "chunks", seen.chunks);
        const std::string key(keyView);
        if (props == kNil || size == kNil || chunks == kNil || a->kind(chunks) != NodeKind::List)
            return fail("TensorStorageMetadata without properties/size/chunks", tsm, key);
        // TensorProperties pickles its state as a 5-tuple (dtype first); older torch as a dict.
        NodeId state = a->kind(props) == NodeKind::Object ? a->objState(props) : kNil;
        NodeId dt = kNil;
        if (state != kNil && a->kind(state) == NodeKind::Tuple)
            dt = a->item(state, 0);
        else if (state != kNil)
            dt = a->get(props, "dtype");
        if (dt == kNil || a->kind(dt) != NodeKind::Global)
            return fail("TensorProperties without a dtype", props, key);
        auto shape = ints(size, key, "size");
        if (!shape)
            return shape.error();

        uint32_t ti = byKey.find(keyView.size(), h);
        if (ti != FlatStringMap::kAbsent) {
            if (ti & kObjectBit)
                return fail("key is both a tensor and an object", tsm, key);
            // rank-local metadata files: the same key from another rank
            if (index.tensors[ti].shape != *shape)
                return fail("global shape differs between metadata files", size, key);
        } else {
            ti = uint32_t(index.tensors.size());
            TensorEntry t;
            t.key = key;
            t.dtypeName = std::string(a->globalName(dt));
            t.dtype = dtypeFromName(t.dtypeName).value_or(DType::Unknown);
            t.shape = std::move(*shape);
            index.tensors.push_back(std::move(t));
            byKey.insert(keyView.size(), h, ti);
        }
        TensorEntry &t = index.tensors[ti];
        const size_t nd = t.shape.size();
        const size_t known = t.chunks.size(); // chunks from earlier metadata files
        t.chunks.reserve(t.chunks.size() + a->size(chunks));
        t.chunkDims.reserve(t.chunkDims.size() + 2 * nd * a->size(chunks));
        scratch.resize(2 * nd);
        bool ok = true;
        NodeId bad = kNil;
        a->forEachItem(chunks, [&](NodeId c) {
            if (!ok)
                return;
            if (!a->intTupleInto(a->field(c, PickleArena::ChunkRecord, 0, "offsets", seen.offsets),
                                 std::span(scratch).first(nd)) ||
                !a->intTupleInto(a->field(c, PickleArena::ChunkRecord, 1, "sizes", seen.sizes),
                                 std::span(scratch).subspan(nd))) {
                ok = false;
                bad = c;
                return;
            }
            // Rank-local metadata: a replicated tensor is described by every rank that wrote a
            // copy. Keep the first, as a collective save would have de-duplicated it.
            for (size_t k = 0; k < known; ++k)
                if (std::equal(scratch.begin(), scratch.end(), t.chunkOffsets(k).begin()))
                    return;
            t.chunkDims.insert(t.chunkDims.end(), scratch.begin(), scratch.end());
            Location loc;
            loc.file = kUnassigned;
            t.chunks.push_back(loc);
        });
        if (!ok)
            return fail("chunk offsets/sizes do not match the tensor's rank", bad, key);
        return Ok{};
    }

    Status parse(NodeId root)
    {
        if (!classIs(root, "Metadata") && !classIs(root, "MCoreMetadata"))
            return fail("not a DCP Metadata object (found " +
                            (a->kind(root) == NodeKind::Object ? a->className(root)
                                                               : std::string("a plain value")) +
                            ")",
                        root);
        if (classIs(root, "MCoreMetadata"))
            index.info["metadata_class"] = "MCoreMetadata";
        NodeId sdm = a->get(root, "state_dict_metadata");
        if (sdm == kNil || a->kind(sdm) != NodeKind::Dict)
            return fail("Metadata without state_dict_metadata", root);

        Status st = Ok{};
        // Entries are big: reserve once rather than move them through every doubling.
        index.tensors.reserve(index.tensors.size() + size_t(a->size(sdm)));
        index.objects.reserve(index.objects.size() + size_t(a->size(sdm)));
        order.reserve(order.size() + size_t(a->size(sdm)));
        orderHash.reserve(order.capacity());
        orderLength.reserve(order.capacity());
        orderValue.reserve(order.capacity());
        a->forEachPair(sdm, [&](NodeId k, NodeId v) {
            if (!st)
                return;
            if (!a->isStr(k)) {
                st = fail("state_dict_metadata key is not a string", k);
                return;
            }
            std::string_view key = a->bytes(k);
            const XXH128_hash_t h = FlatStringMap::hash(key); // once per key
            const bool isBytes = a->kind(v) == NodeKind::Object && seen.bytesClass != kNil &&
                                 a->objClass(v) == seen.bytesClass;
            if (!isBytes && isClass(v, "TensorStorageMetadata", seen.tensorClass)) {
                const size_t before = index.tensors.size();
                st = tensorEntry(key, h, v);
                if (index.tensors.size() > before) {
                    tensorPos.push_back(uint32_t(order.size()));
                    appendOrder(uint32_t(before), k, key, h);
                }
            } else if (isBytes || isClass(v, "BytesStorageMetadata", seen.bytesClass)) {
                const uint32_t oi = uint32_t(index.objects.size());
                if (byKey.insert(key.size(), h, oi | kObjectBit) == (oi | kObjectBit)) {
                    objectPos.push_back(uint32_t(order.size()));
                    appendOrder(oi | kObjectBit, k, key, h);
                    ObjectEntry o;
                    o.key = std::string(key);
                    index.objects.push_back(std::move(o));
                }
            } else {
                st = fail(
                    "unknown storage metadata class '" +
                        (a->kind(v) == NodeKind::Object ? a->className(v) : std::string("?")) + "'",
                    v, std::string(key));
            }
        });
        if (!st)
            return st;

        // planner_data only sets paths and storage_data only sets locations (disjoint members
        // of entries that no longer move), so the two run side by side.
        NodeId pd = a->get(root, "planner_data");
        std::thread planner;
        if (pd != kNil && a->kind(pd) == NodeKind::Dict)
            planner = std::thread([this, pd] { plannerData(pd); });
        NodeId sd = a->get(root, "storage_data");
        if (sd != kNil && a->kind(sd) == NodeKind::Dict)
            st = storageData(sd);
        else
            st = fail("Metadata without storage_data (not written by FileSystemWriter?)", root);
        if (planner.joinable())
            planner.join();
        if (!st)
            return st;
        if (NodeId v = a->get(root, "version"); v != kNil) {
            if (a->isStr(v))
                index.info["dcp_version"] = std::string(a->bytes(v));
            else if (a->kind(v) == NodeKind::Float)
                index.info["dcp_version"] = std::to_string(a->real(v));
        }
        if (NodeId sm = a->get(root, "storage_meta");
            sm != kNil && a->kind(sm) == NodeKind::Object) {
            if (NodeId id = a->get(sm, "save_id"); id != kNil && a->isStr(id))
                index.info["save_id"] = std::string(a->bytes(id));
            if (NodeId cp = a->get(sm, "checkpoint_id"); cp != kNil) {
                if (a->isStr(cp)) {
                    index.info["saved_as"] = std::string(a->bytes(cp));
                } else if (a->kind(cp) == NodeKind::Object) { // pathlib.PosixPath('/', 'a', …)
                    std::string p;
                    for (NodeId part : a->items(a->objArgs(cp)))
                        if (a->isStr(part)) {
                            std::string s(a->bytes(part));
                            p += (p.empty() || p.back() == '/') ? s : "/" + s;
                        }
                    index.info["saved_as"] = p;
                }
            }
        }
        if (a->get(root, "mcore_data") != kNil)
            index.info["mcore_data"] = "present";
        return Ok{};
    }

    void plannerData(NodeId pd)
    {
        size_t cursor = 0;
        std::vector<std::string_view> path;
        std::deque<std::string> numbers; // int components, spelled as str() would
        a->forEachPair(pd, [&](NodeId k, NodeId v) {
            if (!a->isStr(k) || (a->kind(v) != NodeKind::Tuple && a->kind(v) != NodeKind::List))
                return;
            path.clear();
            numbers.clear();
            a->forEachItem(v, [&](NodeId e) {
                if (a->isStr(e))
                    path.push_back(a->bytes(e));
                else if (a->isInt(e))
                    path.push_back(numbers.emplace_back(std::to_string(a->integer(e))));
            });
            const std::string_view key = a->bytes(k);
            const uint32_t found = lookup(k, key, cursor);
            if (found == FlatStringMap::kAbsent)
                return;
            KeyPath &dest = (found & kObjectBit) ? index.objects[found & ~kObjectBit].path
                                                 : index.tensors[found].path;
            dest = KeyPath::fromParts(key, path);
        });
    }

    Status storageData(NodeId sd)
    {
        std::unordered_map<std::string_view, uint32_t> files;
        NodeId lastRel = kNil; // file names are memoised: mostly the same value as last time
        uint32_t lastFile = 0;
        size_t cursor = 0;
        Status st = Ok{};
        std::vector<int64_t> offsets;
        a->forEachPair(sd, [&](NodeId mi, NodeId si) {
            if (!st)
                return;
            NodeId fqnNode = a->field(mi, PickleArena::IndexRecord, 0, "fqn", seen.fqn);
            if (fqnNode == kNil || !a->isStr(fqnNode)) {
                st = fail("storage_data key without an fqn", mi);
                return;
            }
            const std::string_view fqn = a->bytes(fqnNode);
            NodeId rel = a->field(si, PickleArena::StorageRecord, 0, "relative_path",
                                  seen.relativePath),
                   off = a->field(si, PickleArena::StorageRecord, 1, "offset", seen.offset),
                   len = a->field(si, PickleArena::StorageRecord, 2, "length", seen.length);
            if (rel == kNil || !a->isStr(rel) || off == kNil || !a->isInt(off) || len == kNil ||
                !a->isInt(len) || a->integer(off) < 0 || a->integer(len) < 0) {
                st = fail("_StorageInfo without relative_path/offset/length", si, std::string(fqn));
                return;
            }
            Location loc;
            const std::string_view relPath = a->bytes(rel);
            // Each item pickles its own copy of the file name; items of one file come together.
            if (rel == lastRel || (lastRel != kNil && relPath == a->bytes(lastRel))) {
                loc.file = lastFile;
            } else if (auto it = files.find(relPath); it != files.end()) {
                loc.file = it->second;
            } else {
                std::string p(relPath);
                if (p.empty() || p.find("..") != std::string::npos || p[0] == '/') {
                    st = fail("data file name '" + p + "' leaves the checkpoint directory", rel,
                              std::string(fqn));
                    return;
                }
                loc.file = internFile(index, p);
                files.emplace(relPath, loc.file);
            }
            lastRel = rel;
            lastFile = loc.file;
            loc.offset = uint64_t(a->integer(off));
            loc.length = uint64_t(a->integer(len));
            if (NodeId td = a->field(si, PickleArena::StorageRecord, 3, "transform_descriptors",
                                     seen.transforms);
                td != kNil && (a->kind(td) == NodeKind::List || a->kind(td) == NodeKind::Tuple) &&
                a->size(td) > 0) {
                std::vector<std::string> chain;
                a->forEachItem(td, [&](NodeId d) {
                    if (a->isStr(d))
                        chain.emplace_back(a->bytes(d));
                });
                loc.transforms = internTransforms(index, std::move(chain));
            }
            const uint32_t found = lookup(fqnNode, fqn, cursor);
            if (found == FlatStringMap::kAbsent) {
                index.problems.push_back({std::string(fqn), metaFile, a->offsetOf(mi),
                                          "storage entry for a key with no metadata"});
                return;
            }
            if (found & kObjectBit) {
                index.objects[found & ~kObjectBit].location = loc;
                return;
            }
            TensorEntry &t = index.tensors[found];
            const size_t nd = t.ndim();
            offsets.resize(nd);
            if (!a->intTupleInto(a->field(mi, PickleArena::IndexRecord, 2, "offset", seen.offset),
                                 offsets)) {
                st = fail("storage_data index without chunk offsets of the tensor's rank", mi,
                          t.key);
                return;
            }
            auto matches = [&](size_t c) {
                const int64_t *o = t.chunkOffsets(c).data();
                for (size_t d = 0; d < nd; ++d)
                    if (offsets[d] != o[d])
                        return false;
                return true;
            };
            // `index` is the chunk's position: a hint, verified against the offsets.
            size_t chunk = SIZE_MAX;
            if (NodeId hint = a->field(mi, PickleArena::IndexRecord, 1, "index", seen.index);
                hint != kNil && a->isInt(hint) && a->integer(hint) >= 0 &&
                size_t(a->integer(hint)) < t.chunks.size() && matches(size_t(a->integer(hint))))
                chunk = size_t(a->integer(hint));
            for (size_t c = 0; chunk == SIZE_MAX && c < t.chunks.size(); ++c)
                if (matches(c))
                    chunk = c;
            if (chunk == SIZE_MAX) {
                index.problems.push_back({t.key, metaFile, a->offsetOf(mi),
                                          "storage entry for chunk offsets that no chunk has"});
                return;
            }
            if (t.chunks[chunk].file == kUnassigned) // a later rank's copy of a chunk we have
                t.chunks[chunk] = loc;
        });
        return st;
    }
};

} // namespace

Status readDcp(const std::string &dir, CheckpointIndex &index)
{
    std::vector<std::string> metas;
    if (fs::exists(fs::path(dir) / ".metadata")) {
        metas.push_back(".metadata");
    } else {
        std::error_code ec;
        for (const auto &e : fs::directory_iterator(dir, ec)) {
            const std::string n = e.path().filename().string();
            if (n.starts_with("__") && n.ends_with(".metadata"))
                metas.push_back(n);
        }
        std::sort(metas.begin(), metas.end());
        if (!metas.empty())
            index.info["rank_local_metadata"] = std::to_string(metas.size());
    }
    if (metas.empty())
        return makeError(Error::Code::NotFound, "no .metadata file").inFile(dir);

    DcpBuilder b{index};
    std::vector<std::shared_ptr<const MappedFile>> keepMapped; // b.byKey views into them
    for (const std::string &m : metas) {
        const std::string path = (fs::path(dir) / m).string();
        auto file = MappedFile::open(path, true);
        if (!file)
            return file.error();
        if ((*file)->size() == 0)
            return makeError(Error::Code::Format, "empty metadata file").inFile(path);
        keepMapped.push_back(*file);
        auto arena = parsePickle((*file)->bytes());
        if (!arena)
            return arena.error().inFile(path);
        b.a = &*arena;
        ++b.fileNo;
        b.metaFile = path;
        Status st = b.parse(arena->root());
        if (!st)
            return st;
    }
    // Every chunk must have been given a place by storage_data.
    for (TensorEntry &t : index.tensors) {
        size_t missing = 0;
        for (const Location &l : t.chunks)
            missing += l.file == kUnassigned;
        if (missing)
            index.problems.push_back({t.key,
                                      (fs::path(dir) / metas.front()).string(),
                                      {},
                                      std::to_string(missing) + " of " +
                                          std::to_string(t.chunks.size()) +
                                          " chunks have no storage entry"});
    }
    for (ObjectEntry &o : index.objects)
        if (!o.location)
            index.problems.push_back({o.key,
                                      (fs::path(dir) / metas.front()).string(),
                                      {},
                                      "object has no storage entry"});
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
    for (size_t i = 0; i < index.files.size(); ++i) {
        std::error_code ec;
        auto sz = fs::file_size(fs::path(index.dataDir) / index.files[i], ec);
        if (!ec)
            index.fileSizes[i] = sz;
    }
}

} // namespace shardscope::detail
