// SPDX-License-Identifier: MIT
#include "read/dcpstream.h"

namespace shardscope::detail {

bool DcpStream::offer(const PickleArena &arena, std::string_view name, NodeId dict,
                      std::span<const NodeId> pairs, uint64_t)
{
    if (pairs.size() % 2 != 0)
        return false;
    // Set before the committing thread starts, never after: it reads m_words (one stream per
    // decode, so the first offer's is every offer's).
    if (!m_thread.joinable())
        m_words.stream = arena.stream();
    if (name == "state_dict_metadata")
        return takeEntries(arena, dict, pairs);
    if (name == "planner_data")
        return takePaths(arena, dict, pairs);
    if (name == "storage_data")
        return takeStorage(arena, dict, pairs);
    return false;
}

bool DcpStream::takeEntries(const PickleArena &arena, NodeId dict, std::span<const NodeId> pairs)
{
    // Entries are committed in order and before anything is matched against them.
    if (m_entriesStopped || m_othersTaken || (m_entriesDict != kNil && dict != m_entriesDict)) {
        m_entriesStopped = true;
        return false;
    }
    EntryBatch batch = spare<EntryBatch>();
    batch.items.reserve(pairs.size() / 2);
    for (size_t i = 0; i < pairs.size(); i += 2)
        if (!m_indexer.extractEntry(arena, pairs[i], pairs[i + 1], batch)) {
            m_entriesStopped = true; // the caller meets the same error, in order
            return false;
        }
    m_entriesDict = dict;
    push(std::move(batch));
    return true;
}

bool DcpStream::takePaths(const PickleArena &arena, NodeId dict, std::span<const NodeId> pairs)
{
    if (m_entriesDict == kNil || m_entriesStopped || (m_pathsDict != kNil && dict != m_pathsDict)) {
        m_pathsDeclined = true;
        return false;
    }
    PathBatch batch = spare<PathBatch>();
    batch.items.reserve(pairs.size() / 2);
    for (size_t i = 0; i < pairs.size(); i += 2)
        if (!m_indexer.extractPath(arena, pairs[i], pairs[i + 1], batch, true)) {
            m_pathsDeclined = true;
            return false;
        }
    m_pathsDict = dict;
    m_othersTaken = true;
    push(std::move(batch));
    return true;
}

bool DcpStream::takeStorage(const PickleArena &arena, NodeId dict, std::span<const NodeId> pairs)
{
    if (m_entriesDict == kNil || m_entriesStopped ||
        (m_storageDict != kNil && dict != m_storageDict))
        return false;
    StorageBatch batch = spare<StorageBatch>();
    batch.offset = arena.offsetOf(dict); // as indexing after decoding has it
    batch.items.reserve(pairs.size() / 2);
    for (size_t i = 0; i < pairs.size(); i += 2) {
        const StorageItem item = m_indexer.extractStorage(arena, pairs[i], pairs[i + 1]);
        for (NodeId w : {item.fqn, item.index, item.offsets, item.relativePath, item.offset,
                         item.length, item.transforms})
            if (!PickleArena::isSelfContained(w))
                return false; // a transform chain (a list), a long name, a big int: later
        batch.items.push_back(item);
    }
    m_storageDict = dict;
    m_othersTaken = true;
    // Storage comes last: every key and path is taken by now, unless some were declined.
    if (!m_keysAnnounced) {
        m_keysAnnounced = true;
        batch.keysKnown = m_onKeysKnown && m_pathsDict != kNil && !m_pathsDeclined;
    }
    push(std::move(batch));
    return true;
}

void DcpStream::push(Batch &&batch)
{
    if (!m_thread.joinable())
        m_thread = std::thread([this] { loop(); });
    {
        std::lock_guard lock(m_mutex);
        m_queue.push_back(std::move(batch));
    }
    m_wake.notify_one();
}

void DcpStream::loop()
{
    std::unique_lock lock(m_mutex);
    for (;;) {
        m_wake.wait(lock, [this] { return m_closing || !m_queue.empty(); });
        if (m_queue.empty())
            return;
        Batch batch = std::move(m_queue.front());
        m_queue.pop_front();
        lock.unlock();
        if (m_status)
            commit(batch);
        // Emptied, its buffers go back to the decoder for a later batch: fresh ones would be
        // pages the kernel has to map, a few hundred megabytes of them over a big file.
        std::visit([](auto &b) { b.clear(); }, batch);
        lock.lock();
        if (m_spare.size() < kSpares)
            m_spare.push_back(std::move(batch));
    }
}

void DcpStream::commit(Batch &batch)
{
    if (auto *entries = std::get_if<EntryBatch>(&batch)) {
        m_status = m_indexer.commitEntries(*entries);
    } else if (auto *paths = std::get_if<PathBatch>(&batch)) {
        m_indexer.commitPaths(m_words, *paths);
    } else if (auto *storage = std::get_if<StorageBatch>(&batch)) {
        if (storage->keysKnown) {
            try {
                m_onKeysKnown();
            } catch (...) { // a caller's early look; the open goes on without it
            }
        }
        m_status = m_indexer.commitStorage(m_words, storage->items, storage->offset, m_storage);
    }
}

Status DcpStream::finish()
{
    if (m_thread.joinable()) {
        {
            std::lock_guard lock(m_mutex);
            m_closing = true;
        }
        m_wake.notify_one();
        m_thread.join();
    }
    return m_status;
}

} // namespace shardscope::detail
