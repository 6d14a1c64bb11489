// SPDX-License-Identifier: MIT
#pragma once

#include "read/dcpindexer.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <variant>

namespace shardscope::detail {

/**
 * Indexes a DCP .metadata while it is being decoded. The decoder offers each batch of
 * state_dict_metadata, planner_data and storage_data items (see DictSink); this takes them out
 * of the arena on the decoder's thread and commits them on its own, so the two cores share the
 * work and the big dicts are never stored. What it declines stays in the dicts for the caller to
 * index after decoding, in the same order, so the index is the same either way:
 *  - state_dict_metadata is taken up to its first item that does not extract cleanly (the
 *    caller then reports that item's error), and only before anything else was taken;
 *  - planner_data and storage_data are taken only after entries were, batch by batch.
 */
class DcpStream final : public DictSink
{
public:
    explicit DcpStream(DcpIndexer &indexer)
        : m_indexer(indexer)
    {}
    ~DcpStream() override { finish(); }
    DcpStream(const DcpStream &) = delete;
    DcpStream &operator=(const DcpStream &) = delete;

    bool offer(const PickleArena &arena, std::string_view name, NodeId dict,
               std::span<const NodeId> pairs, uint64_t offset) override;

    /**
     * Called once on the committing thread when every entry and path is in the index and the
     * first storage item is not yet (entries, paths and storage come in that order). Only when
     * the stream took all of state_dict_metadata and planner_data: what it declines is indexed
     * after decoding.
     */
    void onKeysKnown(std::function<void()> fn) { m_onKeysKnown = std::move(fn); }

    /** Waits until everything taken is committed; the first error among it. */
    Status finish();

    /** The dicts it took items of (kNil: none), to check against the Metadata decoded. */
    NodeId entriesDict() const { return m_entriesDict; }
    NodeId pathsDict() const { return m_pathsDict; }
    NodeId storageDict() const { return m_storageDict; }
    /** Whether planner_data or storage_data items were taken (entries must all come first). */
    bool othersTaken() const { return m_othersTaken; }
    /** For the storage items left to the caller, after finish(). */
    DcpIndexer::StorageState &storageState() { return m_storage; }

private:
    struct StorageBatch
    {
        std::vector<StorageItem> items;
        uint64_t offset = 0;    ///< storage_data's, see StorageItem::at
        bool keysKnown = false; ///< call m_onKeysKnown before committing it
        void clear()
        {
            items.clear();
            keysKnown = false;
        }
    };
    using Batch = std::variant<EntryBatch, PathBatch, StorageBatch>;
    bool takeEntries(const PickleArena &arena, NodeId dict, std::span<const NodeId> pairs);
    bool takePaths(const PickleArena &arena, NodeId dict, std::span<const NodeId> pairs);
    bool takeStorage(const PickleArena &arena, NodeId dict, std::span<const NodeId> pairs);
    void push(Batch &&batch);
    /** A committed batch of that kind to fill again, else a new one. */
    template<typename T>
    T spare()
    {
        std::lock_guard lock(m_mutex);
        for (size_t i = m_spare.size(); i-- > 0;)
            if (T *b = std::get_if<T>(&m_spare[i])) {
                T out = std::move(*b);
                m_spare.erase(m_spare.begin() + std::ptrdiff_t(i));
                return out;
            }
        return {};
    }
    static constexpr size_t kSpares = 8;
    void loop();
    void commit(Batch &batch);

    DcpIndexer &m_indexer;
    WordValues m_words;
    NodeId m_entriesDict = kNil, m_pathsDict = kNil, m_storageDict = kNil;
    bool m_entriesStopped = false;
    bool m_othersTaken = false;
    bool m_pathsDeclined = false; ///< a planner_data batch was left to the caller
    bool m_keysAnnounced = false; ///< a storage batch carries keysKnown
    std::function<void()> m_onKeysKnown;
    DcpIndexer::StorageState m_storage;

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<Batch> m_queue;
    std::vector<Batch> m_spare; // committed batches, emptied (see spare())
    bool m_closing = false;
    Status m_status = Ok{}; // the committing thread's, read after it ends
    std::thread m_thread;
};

} // namespace shardscope::detail
