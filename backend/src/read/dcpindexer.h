// SPDX-License-Identifier: MIT
#pragma once

#include "common/flatmap.h"
#include "read/pickle.h"
#include "read/readers.h"

#include <deque>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardscope::detail {

/*
 * A DCP .metadata becomes an index in two steps: items are taken out of the decoded pickle
 * (extract*, which read the arena) and then added to the index (commit*, which do not). Taken
 * out, an item is views into the metadata stream and plain numbers, so the second step can run
 * on another thread while the decoder goes on (see DcpStream), or right after, on the same one.
 */

/** One state_dict_metadata pair. */
struct EntryItem
{
    NodeId keyValue = kNil; ///< the key as a pickle value (see DcpIndexer::lookup)
    std::string_view key;
    std::string_view dtype;
    bool object = false; ///< a BYTE_IO object, not a tensor
    uint32_t ndim = 0, chunks = 0;
    size_t dims = 0; ///< where its shape, then each chunk's offsets and sizes, start in `dims`
};
struct EntryBatch
{
    std::vector<EntryItem> items;
    std::vector<int64_t> dims;
    void clear()
    {
        items.clear();
        dims.clear();
    }
};

/** One planner_data pair: a key and its path's components (self-contained str/int values). */
struct PathItem
{
    NodeId keyValue = kNil;
    std::string_view key;
    uint32_t first = 0, count = 0; ///< in `parts`
};
struct PathBatch
{
    std::vector<PathItem> items;
    std::vector<NodeId> parts;
    void clear()
    {
        items.clear();
        parts.clear();
    }
};

/** One storage_data pair: the MetadataIndex and _StorageInfo fields (kNil: absent). */
struct StorageItem
{
    NodeId fqn, index, offsets;
    NodeId relativePath, offset, length, transforms;
    /** Where its MetadataIndex or _StorageInfo object begins; kNoPosition when both were folded
     *  into records, which keep none: problems then name where storage_data begins. */
    uint64_t at;
    static constexpr uint64_t kNoPosition = UINT64_MAX;
};

// How commits read pickle values: self-contained words only (any thread, while the decoder
// runs), or anything, from a finished arena.
struct WordValues
{
    std::span<const uint8_t> stream;
    bool isStr(NodeId v) const { return PickleArena::isWordStr(v); }
    std::string_view bytes(NodeId v) const { return PickleArena::wordBytes(stream, v); }
    // Booleans count as ints, as PickleArena::isInt has them.
    bool isInt(NodeId v) const
    {
        return PickleArena::isWordInt(v) || v == PickleArena::kTrueWord ||
               v == PickleArena::kFalseWord;
    }
    int64_t integer(NodeId v) const
    {
        return PickleArena::isWordInt(v)     ? PickleArena::wordInt(v)
               : v == PickleArena::kTrueWord ? 1
                                             : 0;
    }
    bool intTupleInto(NodeId v, std::span<int64_t> out) const
    {
        return PickleArena::wordIntTupleInto(v, out);
    }
    std::vector<std::string> strings(NodeId) const { return {}; } // chains are lists: arena
};
struct ArenaValues
{
    const PickleArena *a;
    bool isStr(NodeId v) const { return a->isStr(v); }
    std::string_view bytes(NodeId v) const { return a->bytes(v); }
    bool isInt(NodeId v) const { return a->isInt(v); }
    int64_t integer(NodeId v) const { return a->integer(v); }
    bool intTupleInto(NodeId v, std::span<int64_t> out) const { return a->intTupleInto(v, out); }
    std::vector<std::string> strings(NodeId v) const;
};

class DcpIndexer
{
public:
    explicit DcpIndexer(CheckpointIndex &index)
        : m_index(index)
    {}

    /**
     * Reserves room for about `keys` keys: capacity nobody writes to costs address space only,
     * while growing by doubling copies and faults in the arrays again and again.
     */
    void reserve(size_t keys)
    {
        try {
            m_index.tensors.reserve(keys);
            m_index.objects.reserve(keys / 2);
            for (auto *v : {&m_order, &m_orderLength, &m_orderFile, &m_tensorPos, &m_objectPos})
                v->reserve(keys);
            m_orderHash.reserve(keys);
            m_orderValue.reserve(keys);
        } catch (const std::bad_alloc &) { // strict overcommit: the arrays grow as they go
        }
    }

    /** The next metadata file (rank-local metadata comes as several). */
    void startFile(std::string path)
    {
        m_file = std::move(path);
        ++m_fileNo;
    }
    const std::string &file() const { return m_file; }

    /** The forms TensorProperties' pickled states took (kProperties… bits). */
    static constexpr uint8_t kPropertiesFive = 1, kPropertiesSix = 2, kPropertiesDict = 4,
                             kPropertiesOther = 8;
    uint8_t propertyForms() const { return m_propertyForms; }

    // Extraction: reads `a`, which must not change meanwhile. Errors name the file and offset.
    Status extractEntry(const PickleArena &a, NodeId key, NodeId value, EntryBatch &out);
    /** False when a component is not a self-contained str or int and `wordsOnly`. */
    bool extractPath(const PickleArena &a, NodeId key, NodeId value, PathBatch &out,
                     bool wordsOnly) const;
    /** The fields of a storage_data pair, whatever form its objects took. */
    StorageItem extractStorage(const PickleArena &a, NodeId key, NodeId value);

    // Commits, in state_dict_metadata order for entries; paths and storage after the entries.
    Status commitEntry(const EntryItem &item, const int64_t *dims)
    {
        return commitEntry(item, dims, FlatStringMap::hash(item.key));
    }
    /** commitEntry() for each item in turn, its key's table slot loaded ahead; the first error. */
    Status commitEntries(const EntryBatch &batch);
    template<typename Values>
    void commitPath(const Values &v, const PathItem &item, const NodeId *parts)
    {
        commitPath(v, item, parts, lookup(item.keyValue, item.key, pathCursor));
    }
    /** commitPath() for each item in turn, looked up and loaded ahead (see commitStorage). */
    void commitPaths(const WordValues &v, const PathBatch &batch);
    struct StorageState
    {
        std::unordered_map<std::string_view, uint32_t> files;
        NodeId lastRel = kNil; // file names are memoised: mostly the same value as last time
        uint32_t lastFile = 0;
        size_t cursor = 0;
        std::vector<int64_t> offsets;
        uint32_t lastTensor = UINT32_MAX; // the previous item's tensor, and its next chunk
        size_t nextChunk = 0;
        /** Chunks by their offsets' hash, built for a tensor the first time an item of it
         *  carries no usable index hint: a scan per item would be quadratic in its chunks. */
        std::unordered_map<uint32_t, std::unordered_multimap<uint64_t, uint32_t>> chunksByOffsets;
    };
    /** `dictOffset`: where storage_data begins, for problems with an item that has no `at`. */
    template<typename Values>
    Status commitStorage(const Values &v, const StorageItem &item, uint64_t dictOffset,
                         StorageState &state)
    {
        const uint32_t found =
            v.isStr(item.fqn) ? lookup(item.fqn, v.bytes(item.fqn), state.cursor) : kNotLooked;
        return commitStorage(v, item, found, dictOffset, state);
    }
    /**
     * commitStorage() for each item in turn, with the same result: the keys are looked up
     * first, and what each commit reads (the key table, the entry, its chunk) is loaded a few
     * items ahead. Storage items land on random entries of a table and an index far bigger
     * than the cache: one at a time, each waited for three cache misses.
     */
    Status commitStorage(const WordValues &v, std::span<const StorageItem> items,
                         uint64_t dictOffset, StorageState &state);

    size_t pathCursor = 0; // commitPath's lookup hint
    /** Whether every chunk and object committed so far has a storage location. */
    bool allPlaced() const { return m_unplaced == 0; }

    Error fail(const PickleArena &a, std::string msg, NodeId at, std::string_view key = {}) const;

private:
    static constexpr uint32_t kObjectBit = 0x80000000u;
    static constexpr uint32_t kNotLooked = FlatStringMap::kAbsent - 1; // an fqn that is no str
    uint32_t lookup(NodeId keyValue, std::string_view key, size_t &cursor) const
    {
        const uint32_t same = sameValue(keyValue, cursor);
        return same != FlatStringMap::kAbsent
                   ? same
                   : lookup(key.size(), FlatStringMap::hash(key), cursor);
    }
    /** The key at the cursor or after it when it is that very pickle value (kAbsent: not). */
    uint32_t sameValue(NodeId keyValue, size_t &cursor) const;
    uint32_t lookup(size_t length, const XXH128_hash_t &h, size_t &cursor) const;
    /** With the key's hash, computed ahead. */
    Status commitEntry(const EntryItem &item, const int64_t *dims, const XXH128_hash_t &h);
    /** m_hashes[i]: the hash of keyOf(i), i < n (left as it was where it has no data()), each
     *  key's bytes loaded a few keys ahead. */
    template<typename KeyOf>
    void hashAll(size_t n, const KeyOf &keyOf);
    /** `found`: what lookup() gave for the item's fqn. */
    template<typename Values>
    Status commitStorage(const Values &v, const StorageItem &item, uint32_t found,
                         uint64_t dictOffset, StorageState &state);
    template<typename Values>
    void commitPath(const Values &v, const PathItem &item, const NodeId *parts, uint32_t found);
    /** m_found[i]: lookup()'s answer for keyOf(i), i < n (kNotLooked where it has no data()). */
    template<typename KeyOf>
    void findAll(size_t n, const KeyOf &keyOf);
    /** Starts loading the fields commitStorage() reads of entry `found`. */
    void prefetchEntry(uint32_t found) const;
    /** Starts loading the chunk an item's index hints at, once its entry is loaded. */
    void prefetchChunk(const WordValues &v, const StorageItem &item, uint32_t found) const;
    void appendOrder(uint32_t entry, NodeId keyValue, std::string_view key, const XXH128_hash_t &h);
    size_t positionOf(uint32_t e) const
    {
        return (e & kObjectBit) ? m_objectPos[e & ~kObjectBit] : m_tensorPos[e];
    }
    bool isClass(const PickleArena &a, NodeId obj, std::string_view name, NodeId &seen) const;

    CheckpointIndex &m_index;
    std::string m_file;
    uint32_t m_fileNo = 0;
    uint8_t m_propertyForms = 0;
    size_t m_unplaced = 0; // chunks and objects without a location yet
    // Key → tensor index, or object index | kObjectBit.
    FlatStringMap m_byKey{1 << 16};
    // Keys in state_dict_metadata order, and how lookup() recognises them.
    std::vector<uint32_t> m_order;
    std::vector<XXH128_hash_t> m_orderHash;
    std::vector<uint32_t> m_orderLength;
    std::vector<NodeId> m_orderValue;
    std::vector<uint32_t> m_orderFile;              // values are per arena, so per file
    std::vector<uint32_t> m_tensorPos, m_objectPos; // entry → position in m_order
    // Memoised classes and field names, see PickleArena::get(v, key, seen).
    struct Seen
    {
        NodeId offsets = kNil, sizes = kNil, fqn = kNil, offset = kNil, index = kNil,
               relativePath = kNil, length = kNil, transforms = kNil, properties = kNil,
               size = kNil, chunks = kNil, tensorClass = kNil, bytesClass = kNil;
    } m_seen;
    std::vector<std::string_view> m_path; // commitPath's scratch
    std::vector<XXH128_hash_t> m_hashes;  // the batch commits' scratch
    std::vector<uint32_t> m_found;
    std::deque<std::string> m_numbers;
};

} // namespace shardscope::detail
