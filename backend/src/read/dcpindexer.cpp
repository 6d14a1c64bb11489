// SPDX-License-Identifier: MIT
// DCP metadata items → CheckpointIndex entries (see dcpindexer.h).
#include "read/dcpindexer.h"

#include <algorithm>

namespace shardscope::detail {

std::vector<std::string> ArenaValues::strings(NodeId v) const
{
    std::vector<std::string> out;
    if (v != kNil && (a->kind(v) == NodeKind::List || a->kind(v) == NodeKind::Tuple))
        a->forEachItem(v, [&](NodeId d) {
            if (a->isStr(d))
                out.emplace_back(a->bytes(d));
        });
    return out;
}

Error DcpIndexer::fail(const PickleArena &a, std::string msg, NodeId at, std::string_view key) const
{
    Error e = makeError(Error::Code::Format, std::move(msg)).inFile(m_file);
    if (at != kNil)
        e.atOffset(a.offsetOf(at));
    if (!key.empty())
        e.atKey(std::string(key));
    return e;
}

bool DcpIndexer::isClass(const PickleArena &a, NodeId obj, std::string_view name,
                         NodeId &seen) const
{
    if (obj == kNil || a.kind(obj) != NodeKind::Object)
        return false;
    const NodeId c = a.objClass(obj);
    if (c == seen && seen != kNil)
        return true;
    if (c == kNil || a.kind(c) != NodeKind::Global || a.globalName(c) != name)
        return false;
    seen = c;
    return true;
}

Status DcpIndexer::extractEntry(const PickleArena &a, NodeId k, NodeId v, EntryBatch &out)
{
    if (!a.isStr(k))
        return fail(a, "state_dict_metadata key is not a string", k);
    EntryItem item;
    item.keyValue = k;
    item.key = a.bytes(k);
    item.dims = out.dims.size();
    const bool isBytes = a.kind(v) == NodeKind::Object && m_seen.bytesClass != kNil &&
                         a.objClass(v) == m_seen.bytesClass;
    if (isBytes || (!isClass(a, v, "TensorStorageMetadata", m_seen.tensorClass) &&
                    isClass(a, v, "BytesStorageMetadata", m_seen.bytesClass))) {
        item.object = true;
        out.items.push_back(item);
        return Ok{};
    }
    if (a.kind(v) != NodeKind::Object || a.objClass(v) != m_seen.tensorClass)
        return fail(a,
                    "unknown storage metadata class '" +
                        (a.kind(v) == NodeKind::Object ? a.className(v) : std::string("?")) + "'",
                    v, item.key);
    const NodeId props = a.get(v, "properties", m_seen.properties);
    const NodeId size = a.get(v, "size", m_seen.size);
    const NodeId chunks = a.get(v, "chunks", m_seen.chunks);
    if (props == kNil || size == kNil || chunks == kNil || a.kind(chunks) != NodeKind::List)
        return fail(a, "TensorStorageMetadata without properties/size/chunks", v, item.key);
    // TensorProperties pickles its state as a 5-tuple (dtype first); older torch as a dict.
    const NodeId state = a.kind(props) == NodeKind::Object ? a.objState(props) : kNil;
    NodeId dt = kNil;
    // Which torch unpickles it depends on the tuple's length (shardscope/torchcompat.h).
    if (state != kNil && a.kind(state) == NodeKind::Tuple) {
        dt = a.item(state, 0);
        const int64_t n = a.size(state);
        m_propertyForms |= n == 5 ? kPropertiesFive : n == 6 ? kPropertiesSix : kPropertiesOther;
    } else if (state != kNil) {
        dt = a.get(props, "dtype");
        m_propertyForms |= kPropertiesDict;
    }
    if (dt == kNil || a.kind(dt) != NodeKind::Global)
        return fail(a, "TensorProperties without a dtype", props, item.key);
    item.dtype = a.globalName(dt);
    const size_t nd = size_t(a.size(size));
    out.dims.resize(item.dims + nd);
    if (!a.intTupleInto(size, std::span(out.dims).subspan(item.dims))) {
        out.dims.resize(item.dims);
        return fail(a, "size is not a tuple of ints", size, item.key);
    }
    item.ndim = uint32_t(nd);
    item.chunks = uint32_t(a.size(chunks));
    out.dims.resize(item.dims + nd + 2 * nd * item.chunks);
    int64_t *at = out.dims.data() + item.dims + nd;
    NodeId bad = kNil;
    a.forEachItem(chunks, [&](NodeId c) {
        if (bad != kNil)
            return;
        if (!a.intTupleInto(a.field(c, PickleArena::ChunkRecord, 0, "offsets", m_seen.offsets),
                            std::span(at, nd)) ||
            !a.intTupleInto(a.field(c, PickleArena::ChunkRecord, 1, "sizes", m_seen.sizes),
                            std::span(at + nd, nd)))
            bad = c;
        at += 2 * nd;
    });
    if (bad != kNil) {
        out.dims.resize(item.dims);
        return fail(a, "chunk offsets/sizes do not match the tensor's rank", bad, item.key);
    }
    out.items.push_back(item);
    return Ok{};
}

bool DcpIndexer::extractPath(const PickleArena &a, NodeId k, NodeId v, PathBatch &out,
                             bool wordsOnly) const
{
    if (!a.isStr(k) || (a.kind(v) != NodeKind::Tuple && a.kind(v) != NodeKind::List))
        return true; // not a path: nothing to keep
    PathItem item{k, a.bytes(k), uint32_t(out.parts.size()), 0};
    bool ok = true;
    a.forEachItem(v, [&](NodeId e) {
        ok = ok && (!wordsOnly || PickleArena::isSelfContained(e));
        out.parts.push_back(e);
    });
    if (!ok) {
        out.parts.resize(item.first);
        return false;
    }
    item.count = uint32_t(out.parts.size() - item.first);
    out.items.push_back(item);
    return true;
}

StorageItem DcpIndexer::extractStorage(const PickleArena &a, NodeId mi, NodeId si)
{
    return {a.field(mi, PickleArena::IndexRecord, 0, "fqn", m_seen.fqn),
            a.field(mi, PickleArena::IndexRecord, 1, "index", m_seen.index),
            a.field(mi, PickleArena::IndexRecord, 2, "offset", m_seen.offset),
            a.field(si, PickleArena::StorageRecord, 0, "relative_path", m_seen.relativePath),
            a.field(si, PickleArena::StorageRecord, 1, "offset", m_seen.offset),
            a.field(si, PickleArena::StorageRecord, 2, "length", m_seen.length),
            a.field(si, PickleArena::StorageRecord, 3, "transform_descriptors", m_seen.transforms),
            a.isNode(mi)   ? a.offsetOf(mi)
            : a.isNode(si) ? a.offsetOf(si)
                           : StorageItem::kNoPosition};
}

void DcpIndexer::appendOrder(uint32_t entry, NodeId keyValue, std::string_view key,
                             const XXH128_hash_t &h)
{
    m_order.push_back(entry);
    m_orderValue.push_back(keyValue);
    m_orderFile.push_back(m_fileNo);
    m_orderHash.push_back(h);
    m_orderLength.push_back(uint32_t(key.size()));
}

// Items indexed one by one, after decoding: planner_data and a rank's storage entries often
// follow state_dict_metadata's order, so the entry after the previous hit is tried before the
// (long) key is looked up. Batches look theirs up ahead instead (findAll).
uint32_t DcpIndexer::sameValue(NodeId keyValue, size_t &cursor) const
{
    // The coordinator's own keys are the very string objects of state_dict_metadata, so pickle
    // wrote a memo reference: the same value, no hashing needed.
    for (size_t c : {cursor, cursor + 1})
        if (c < m_order.size() && m_orderValue[c] == keyValue && m_orderFile[c] == m_fileNo) {
            cursor = c;
            return m_order[c];
        }
    return FlatStringMap::kAbsent;
}

uint32_t DcpIndexer::lookup(size_t length, const XXH128_hash_t &h, size_t &cursor) const
{
    for (size_t c : {cursor, cursor + 1})
        if (c < m_order.size() && XXH128_isEqual(m_orderHash[c], h) && m_orderLength[c] == length) {
            cursor = c;
            return m_order[c];
        }
    const uint32_t found = m_byKey.find(length, h);
    if (found != FlatStringMap::kAbsent)
        cursor = positionOf(found);
    return found;
}

Status DcpIndexer::commitEntry(const EntryItem &item, const int64_t *dims, const XXH128_hash_t &h)
{
    uint32_t e = m_byKey.find(item.key.size(), h);
    if (item.object) {
        if (e != FlatStringMap::kAbsent)
            return Ok{}; // rank-local metadata: another rank's description of it
        const uint32_t oi = uint32_t(m_index.objects.size());
        m_byKey.insert(item.key.size(), h, oi | kObjectBit);
        m_objectPos.push_back(uint32_t(m_order.size()));
        appendOrder(oi | kObjectBit, item.keyValue, item.key, h);
        ObjectEntry o;
        o.key = item.key;
        m_index.objects.push_back(std::move(o));
        ++m_unplaced;
        return Ok{};
    }
    const size_t nd = item.ndim, width = 2 * nd;
    const int64_t *chunkDims = dims + nd;
    if (e == FlatStringMap::kAbsent) {
        e = uint32_t(m_index.tensors.size());
        m_byKey.insert(item.key.size(), h, e);
        m_tensorPos.push_back(uint32_t(m_order.size()));
        appendOrder(e, item.keyValue, item.key, h);
        TensorEntry &t = m_index.tensors.emplace_back();
        t.key = item.key;
        t.dtypeName = std::string(item.dtype);
        t.dtype = dtypeFromName(t.dtypeName).value_or(DType::Unknown);
        t.shape.assign(dims, dims + nd);
        t.chunkDims.assign(chunkDims, chunkDims + width * item.chunks);
        Location unassigned;
        unassigned.file = kUnassigned;
        t.chunks.assign(item.chunks, unassigned);
        m_unplaced += item.chunks;
        return Ok{};
    }
    auto error = [&](const char *msg) {
        return makeError(Error::Code::Format, msg).inFile(m_file).atKey(std::string(item.key));
    };
    if (e & kObjectBit)
        return error("key is both a tensor and an object");
    // Rank-local metadata files: the same key from another rank. A replicated tensor is
    // described by every rank that wrote a copy; keep the first, as a collective save would.
    TensorEntry &t = m_index.tensors[e];
    if (!std::equal(t.shape.begin(), t.shape.end(), dims, dims + nd))
        return error("global shape differs between metadata files");
    const size_t known = t.chunks.size();
    for (size_t c = 0; c < item.chunks; ++c) {
        const int64_t *d = chunkDims + width * c;
        bool seenBefore = false;
        for (size_t k = 0; k < known && !seenBefore; ++k)
            seenBefore = std::equal(d, d + width, t.chunkDims.data() + width * k);
        if (seenBefore)
            continue;
        t.chunkDims.insert(t.chunkDims.end(), d, d + width);
        Location unassigned;
        unassigned.file = kUnassigned;
        t.chunks.push_back(unassigned);
        ++m_unplaced;
    }
    return Ok{};
}

template<typename Values>
void DcpIndexer::commitPath(const Values &v, const PathItem &item, const NodeId *parts,
                            uint32_t found)
{
    m_path.clear();
    m_numbers.clear();
    for (uint32_t i = 0; i < item.count; ++i) {
        const NodeId e = parts[item.first + i];
        if (v.isStr(e))
            m_path.push_back(v.bytes(e));
        else if (v.isInt(e)) // int components, spelled as str() would
            m_path.push_back(m_numbers.emplace_back(std::to_string(v.integer(e))));
    }
    if (found == FlatStringMap::kAbsent)
        return;
    KeyPath &dest = (found & kObjectBit) ? m_index.objects[found & ~kObjectBit].path
                                         : m_index.tensors[found].path;
    dest = KeyPath::fromParts(item.key, m_path);
}

template<typename KeyOf>
void DcpIndexer::hashAll(size_t n, const KeyOf &keyOf)
{
    constexpr size_t kBytesAhead = 4;
    m_hashes.resize(n);
    for (size_t i = 0; i < n; ++i) {
        if (i + kBytesAhead < n)
            __builtin_prefetch(keyOf(i + kBytesAhead).data());
        if (const std::string_view k = keyOf(i); k.data())
            m_hashes[i] = FlatStringMap::hash(k);
    }
}

// New keys land anywhere in a table far bigger than the cache: the batch is hashed first, then
// the next few keys' slots keep loading while each is committed.
Status DcpIndexer::commitEntries(const EntryBatch &batch)
{
    const std::vector<EntryItem> &items = batch.items;
    const size_t n = items.size();
    hashAll(n, [&](size_t i) { return items[i].key; });
    constexpr size_t kSlotAhead = 8;
    for (size_t i = 0; i < n; ++i) {
        if (i + kSlotAhead < n)
            m_byKey.prefetch(m_hashes[i + kSlotAhead]);
        if (Status st = commitEntry(items[i], batch.dims.data() + items[i].dims, m_hashes[i]); !st)
            return st;
    }
    return Ok{};
}

template<typename KeyOf>
void DcpIndexer::findAll(size_t n, const KeyOf &keyOf)
{
    // Hashes first, then the lookups (each probe's slot loaded a few keys ahead). No cursor:
    // with the slot on its way, checking the entries after the last hit (arrays as big as the
    // table) costs more misses than it saves.
    constexpr size_t kSlotAhead = 16;
    hashAll(n, keyOf);
    m_found.resize(n);
    for (size_t i = 0; i < n; ++i) {
        if (i + kSlotAhead < n && keyOf(i + kSlotAhead).data())
            m_byKey.prefetch(m_hashes[i + kSlotAhead]);
        const std::string_view k = keyOf(i);
        m_found[i] = k.data() ? m_byKey.find(k.size(), m_hashes[i]) : kNotLooked;
    }
}

void DcpIndexer::commitPaths(const WordValues &v, const PathBatch &batch)
{
    const std::vector<PathItem> &items = batch.items;
    const size_t n = items.size();
    findAll(n, [&](size_t i) { return items[i].key; });
    constexpr size_t kEntryAhead = 8;
    for (size_t i = 0; i < n; ++i) {
        if (i + kEntryAhead < n && m_found[i + kEntryAhead] < kNotLooked) {
            const uint32_t e = m_found[i + kEntryAhead];
            __builtin_prefetch((e & kObjectBit) ? &m_index.objects[e & ~kObjectBit].path
                                                : &m_index.tensors[e].path,
                               1);
        }
        commitPath(v, items[i], batch.parts.data(), m_found[i]);
    }
}

void DcpIndexer::prefetchEntry(uint32_t found) const
{
    if (found >= kNotLooked)
        return;
    if (found & kObjectBit) {
        __builtin_prefetch(&m_index.objects[found & ~kObjectBit].location);
    } else {
        const TensorEntry &t = m_index.tensors[found];
        __builtin_prefetch(&t.shape);
        __builtin_prefetch(&t.chunkDims);
    }
}

void DcpIndexer::prefetchChunk(const WordValues &v, const StorageItem &item, uint32_t found) const
{
    if (found >= kNotLooked || (found & kObjectBit) || !v.isInt(item.index))
        return;
    const TensorEntry &t = m_index.tensors[found];
    const int64_t c = v.integer(item.index);
    if (c >= 0 && size_t(c) < t.chunks.size()) {
        __builtin_prefetch(t.chunkDims.data() + 2 * t.ndim() * size_t(c));
        __builtin_prefetch(t.chunks.data() + c, 1);
    }
}

Status DcpIndexer::commitStorage(const WordValues &v, std::span<const StorageItem> items,
                                 uint64_t dictOffset, StorageState &ss)
{
    const size_t n = items.size();
    findAll(n, [&](size_t i) {
        return v.isStr(items[i].fqn) ? v.bytes(items[i].fqn) : std::string_view();
    });
    constexpr size_t kEntryAhead = 8, kChunkAhead = 4;
    for (size_t i = 0; i < n; ++i) {
        if (i + kEntryAhead < n)
            prefetchEntry(m_found[i + kEntryAhead]);
        if (i + kChunkAhead < n)
            prefetchChunk(v, items[i + kChunkAhead], m_found[i + kChunkAhead]);
        if (Status st = commitStorage(v, items[i], m_found[i], dictOffset, ss); !st)
            return st;
    }
    return Ok{};
}

template<typename Values>
Status DcpIndexer::commitStorage(const Values &v, const StorageItem &it, uint32_t found,
                                 uint64_t dictOffset, StorageState &ss)
{
    const uint64_t offset = it.at != StorageItem::kNoPosition ? it.at : dictOffset;
    auto fail = [&](std::string msg, std::string_view key) {
        return makeError(Error::Code::Format, std::move(msg))
            .inFile(m_file)
            .atOffset(offset)
            .atKey(std::string(key));
    };
    if (!v.isStr(it.fqn))
        return fail("storage_data key without an fqn", {});
    const std::string_view fqn = v.bytes(it.fqn);
    if (!v.isStr(it.relativePath) || !v.isInt(it.offset) || !v.isInt(it.length) ||
        v.integer(it.offset) < 0 || v.integer(it.length) < 0)
        return fail("_StorageInfo without relative_path/offset/length", fqn);
    Location loc;
    const std::string_view relPath = v.bytes(it.relativePath);
    // Each item pickles its own copy of the file name; items of one file come together.
    if (it.relativePath == ss.lastRel || (ss.lastRel != kNil && relPath == v.bytes(ss.lastRel))) {
        loc.file = ss.lastFile;
    } else if (auto known = ss.files.find(relPath); known != ss.files.end()) {
        loc.file = known->second;
    } else {
        std::string p(relPath);
        if (p.empty() || p.find("..") != std::string::npos || p[0] == '/')
            return fail("data file name '" + p + "' leaves the checkpoint directory", fqn);
        loc.file = internFile(m_index, p);
        ss.files.emplace(relPath, loc.file);
    }
    ss.lastRel = it.relativePath;
    ss.lastFile = loc.file;
    loc.offset = uint64_t(v.integer(it.offset));
    loc.length = uint64_t(v.integer(it.length));
    if (std::vector<std::string> chain = v.strings(it.transforms); !chain.empty())
        loc.transforms = internTransforms(m_index, std::move(chain));
    if (found == FlatStringMap::kAbsent) {
        m_index.problems.push_back(
            {std::string(fqn), m_file, offset, "storage entry for a key with no metadata"});
        return Ok{};
    }
    if (found & kObjectBit) {
        ObjectEntry &o = m_index.objects[found & ~kObjectBit];
        m_unplaced -= !o.location;
        o.location = loc;
        return Ok{};
    }
    TensorEntry &t = m_index.tensors[found];
    const size_t nd = t.ndim();
    ss.offsets.resize(nd);
    if (!v.intTupleInto(it.offsets, ss.offsets))
        return fail("storage_data index without chunk offsets of the tensor's rank", t.key);
    auto matches = [&](size_t c) {
        const int64_t *o = t.chunkOffsets(c).data();
        for (size_t i = 0; i < nd; ++i)
            if (ss.offsets[i] != o[i])
                return false;
        return true;
    };
    // `index` is the chunk's position: a hint, verified against the offsets.
    size_t chunk = SIZE_MAX;
    if (v.isInt(it.index) && v.integer(it.index) >= 0 &&
        size_t(v.integer(it.index)) < t.chunks.size() && matches(size_t(v.integer(it.index))))
        chunk = size_t(v.integer(it.index));
    // Without it (other writers, or a hostile file with a million chunks): the chunk after the
    // previous item's, else a hash of the offsets, never a scan of every chunk.
    if (chunk == SIZE_MAX && ss.lastTensor == found && ss.nextChunk < t.chunks.size() &&
        matches(ss.nextChunk))
        chunk = ss.nextChunk;
    if (chunk == SIZE_MAX) {
        auto hashOf = [nd](const int64_t *o) {
            uint64_t h = 1469598103934665603ull;
            for (size_t i = 0; i < nd; ++i)
                h = (h ^ uint64_t(o[i])) * 1099511628211ull;
            return h;
        };
        auto &byOffsets = ss.chunksByOffsets[found];
        if (byOffsets.empty())
            for (size_t c = 0; c < t.chunks.size(); ++c)
                byOffsets.emplace(hashOf(t.chunkOffsets(c).data()), uint32_t(c));
        auto [from, to] = byOffsets.equal_range(hashOf(ss.offsets.data()));
        for (auto entry = from; chunk == SIZE_MAX && entry != to; ++entry)
            if (matches(entry->second))
                chunk = entry->second;
    }
    if (chunk == SIZE_MAX) {
        m_index.problems.push_back(
            {t.key.str(), m_file, offset, "storage entry for chunk offsets that no chunk has"});
        return Ok{};
    }
    ss.lastTensor = found;
    ss.nextChunk = chunk + 1;
    if (t.chunks[chunk].file == kUnassigned) { // else a later rank's copy of a chunk we have
        t.chunks.edit()[chunk] = loc;
        --m_unplaced;
    }
    return Ok{};
}

template void DcpIndexer::commitPath(const WordValues &, const PathItem &, const NodeId *,
                                     uint32_t);
template void DcpIndexer::commitPath(const ArenaValues &, const PathItem &, const NodeId *,
                                     uint32_t);
template Status DcpIndexer::commitStorage(const WordValues &, const StorageItem &, uint32_t,
                                          uint64_t, StorageState &);
template Status DcpIndexer::commitStorage(const ArenaValues &, const StorageItem &, uint32_t,
                                          uint64_t, StorageState &);

} // namespace shardscope::detail
