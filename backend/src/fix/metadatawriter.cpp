// SPDX-License-Identifier: MIT
#include "fix/metadatawriter.h"

#include "fix/picklewriter.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <unistd.h>
#include <vector>

namespace shardscope::detail {

namespace {

constexpr std::string_view kMetadata = "torch.distributed.checkpoint.metadata";
constexpr std::string_view kFilesystem = "torch.distributed.checkpoint.filesystem";

class MetadataPickler
{
public:
    explicit MetadataPickler(const CheckpointIndex &index)
        : m_index(index)
    {}

    void setSink(std::function<void(std::string &&)> sink, size_t bytes)
    {
        m_w.setSink(std::move(sink), bytes);
        m_streaming = true;
    }

    std::string write()
    {
        // Only objects with stored bytes (BYTE_IO items) are entries of a DCP checkpoint.
        for (const ObjectEntry &o : m_index.objects)
            if (o.location)
                m_objects.push_back(&o);
        m_keySlot.assign(m_index.tensors.size(), PickleWriter::kNoSlot);
        m_fileSlot.assign(m_index.files.size(), PickleWriter::kNoSlot);
        m_objectSlot.assign(m_objects.size(), PickleWriter::kNoSlot);
        std::fill(std::begin(m_fieldSlot), std::end(m_fieldSlot), PickleWriter::kNoSlot);
        std::fill(std::begin(m_dtypeSlot), std::end(m_dtypeSlot), PickleWriter::kNoSlot);
        // About 250 bytes a chunk (its ChunkStorageMetadata, MetadataIndex and _StorageInfo).
        if (!m_streaming)
            m_w.reserve(m_index.chunkCount() * 250 + m_index.objects.size() * 200 + 4096);
        object(MetadataClass);
        m_w.emptyDict();
        m_w.mark();
        m_w.str("state_dict_metadata");
        stateDictMetadata();
        m_w.str("planner_data");
        plannerData();
        m_w.str("storage_data");
        storageData();
        // read_metadata() makes a StorageMeta when there is none; a fresh load id goes in it.
        m_w.str("storage_meta");
        m_w.none();
        m_w.str("version");
        m_w.str("1.0.0");
        m_w.setItems();
        m_w.build();
        return m_w.finish();
    }

private:
    // The classes every entry names, their memo slots kept here.
    enum Class {
        MetadataClass,
        TensorStorage,
        BytesStorage,
        Properties,
        Chunk,
        Index,
        StorageInfo,
        Size,
        Strided,
        MemFormat,
        ClassCount
    };
    void global(Class c)
    {
        static constexpr std::pair<std::string_view, std::string_view> kNames[ClassCount] = {
            {kMetadata, "Metadata"},
            {kMetadata, "TensorStorageMetadata"},
            {kMetadata, "BytesStorageMetadata"},
            {kMetadata, "TensorProperties"},
            {kMetadata, "ChunkStorageMetadata"},
            {kMetadata, "MetadataIndex"},
            {kFilesystem, "_StorageInfo"},
            {"torch", "Size"},
            {"torch", "strided"},
            {kMetadata, "_MEM_FORMAT_ENCODING"},
        };
        m_w.global(kNames[c].first, kNames[c].second, m_slots[c]);
    }

    // cls.__new__(cls): a dataclass as pickle's copyreg path writes it; BUILD follows.
    void object(Class c)
    {
        global(c);
        m_w.emptyTuple();
        m_w.newObj();
    }

    void size(std::span<const int64_t> dims)
    {
        global(Size);
        if (dims.empty()) {
            m_w.emptyTuple();
        } else {
            m_w.mark();
            for (int64_t d : dims)
                m_w.integer(d);
            m_w.tuple();
        }
        m_w.tuple1();
        m_w.reduce();
    }

    // The dataclasses' field names, written once and fetched from the memo after (Python's
    // pickler memoises the interned attribute names the same way): a sixth of the size.
    enum Field {
        PropertiesField,
        SizeField,
        ChunksField,
        OffsetsField,
        SizesField,
        FqnField,
        IndexField,
        OffsetField,
        RelativePathField,
        LengthField,
        FieldCount
    };
    void field(Field f)
    {
        static constexpr std::string_view kNames[FieldCount] = {
            "properties", "size",  "chunks", "offsets",       "sizes",
            "fqn",        "index", "offset", "relative_path", "length"};
        if (m_fieldSlot[f] == PickleWriter::kNoSlot)
            m_fieldSlot[f] = m_w.sharedStr(kNames[f]);
        else
            m_w.get(m_fieldSlot[f]);
    }

    // An object's key: written with its first entry, fetched after (no hashing of 465,000 keys
    // three times).
    void objectKey(size_t i)
    {
        if (m_objectSlot[i] == PickleWriter::kNoSlot)
            m_objectSlot[i] = m_w.memoStr(m_objects[i]->key);
        else
            m_w.get(m_objectSlot[i]);
    }

    // Key/value pairs of a dict are written in SETITEMS batches, as Python's pickler does.
    template<typename Fn>
    void dictOf(size_t count, Fn &&item)
    {
        m_w.emptyDict();
        for (size_t begin = 0; begin < count; begin += PickleWriter::kBatch) {
            m_w.mark();
            for (size_t i = begin; i < std::min(count, begin + PickleWriter::kBatch); ++i) {
                item(i);
                m_w.flushPoint();
            }
            m_w.setItems();
        }
    }

    void stateDictMetadata()
    {
        const size_t nt = m_index.tensors.size();
        const auto &objects = m_objects;
        dictOf(nt + objects.size(), [&](size_t i) {
            if (i >= nt) {
                objectKey(i - nt);
                object(BytesStorage);
                return;
            }
            const TensorEntry &t = m_index.tensors[i];
            m_keySlot[i] = m_w.memoStr(t.key);
            object(TensorStorage);
            m_w.emptyDict();
            m_w.mark();
            field(PropertiesField);
            object(Properties);
            // TensorProperties.__setstate__ takes (dtype, layout, requires_grad, memory format,
            // pin_memory).
            m_w.mark();
            m_w.global("torch", t.dtypeName, m_dtypeSlot[size_t(t.dtype) % kDtypeSlots]);
            global(Strided);
            m_w.boolean(false);
            global(MemFormat);
            m_w.integer(0); // TORCH_CONTIGUOUS_FORMAT
            m_w.tuple1();
            m_w.reduce();
            m_w.boolean(false);
            m_w.tuple();
            m_w.build();
            field(SizeField);
            size(t.shape);
            field(ChunksField);
            m_w.emptyList();
            for (size_t begin = 0; begin < t.chunks.size(); begin += PickleWriter::kBatch) {
                m_w.mark();
                for (size_t c = begin; c < std::min(t.chunks.size(), begin + PickleWriter::kBatch);
                     ++c) {
                    object(Chunk);
                    m_w.emptyDict();
                    m_w.mark();
                    field(OffsetsField);
                    size(t.chunkOffsets(c));
                    field(SizesField);
                    size(t.chunkSizes(c));
                    m_w.setItems();
                    m_w.build();
                }
                m_w.appends();
            }
            m_w.setItems();
            m_w.build();
        });
    }

    template<typename Entry>
    void path(const Entry &e)
    {
        m_parts.clear();
        e.path.partsInto(e.key, m_parts);
        if (m_parts.empty()) {
            m_w.emptyTuple();
            return;
        }
        m_w.mark();
        for (std::string_view p : m_parts)
            m_w.str(p);
        m_w.tuple();
    }

    void plannerData()
    {
        const size_t nt = m_index.tensors.size();
        const auto &objects = m_objects;
        dictOf(nt + objects.size(), [&](size_t i) {
            if (i < nt) {
                m_w.get(m_keySlot[i]);
                path(m_index.tensors[i]);
            } else {
                objectKey(i - nt);
                path(*objects[i - nt]);
            }
        });
    }

    void storageInfo(const Location &l)
    {
        object(StorageInfo);
        m_w.emptyDict();
        m_w.mark();
        field(RelativePathField);
        uint32_t &slot = m_fileSlot.at(l.file);
        if (slot == PickleWriter::kNoSlot)
            slot = m_w.memoStr(m_index.files[l.file]);
        else
            m_w.get(slot);
        field(OffsetField);
        m_w.integer(int64_t(l.offset));
        field(LengthField);
        m_w.integer(int64_t(l.length));
        if (l.transforms != 0 && l.transforms < m_index.transformChains.size()) {
            m_w.str("transform_descriptors");
            m_w.emptyList();
            m_w.mark();
            for (const std::string &d : m_index.transformChains[l.transforms])
                m_w.str(d);
            m_w.appends();
        }
        m_w.setItems();
        m_w.build();
    }

    void storageData()
    {
        // One item per tensor chunk, then per stored object.
        std::vector<std::pair<uint32_t, uint32_t>> items; // (tensor, chunk)
        for (size_t t = 0; t < m_index.tensors.size(); ++t)
            for (size_t c = 0; c < m_index.tensors[t].chunks.size(); ++c)
                items.emplace_back(uint32_t(t), uint32_t(c));
        const size_t chunkItems = items.size();
        dictOf(chunkItems + m_objects.size(), [&](size_t i) {
            object(Index);
            m_w.emptyDict();
            m_w.mark();
            if (i < chunkItems) {
                const TensorEntry &t = m_index.tensors[items[i].first];
                const uint32_t c = items[i].second;
                field(FqnField);
                m_w.get(m_keySlot[items[i].first]);
                field(IndexField);
                m_w.integer(c);
                field(OffsetField);
                size(t.chunkOffsets(c));
                m_w.setItems();
                m_w.build();
                storageInfo(t.chunks[c]);
            } else {
                const ObjectEntry &o = *m_objects[i - chunkItems];
                field(FqnField);
                objectKey(i - chunkItems);
                field(IndexField);
                m_w.none();
                m_w.setItems();
                m_w.build();
                storageInfo(*o.location);
            }
        });
    }

    const CheckpointIndex &m_index;
    PickleWriter m_w;
    uint32_t m_slots[ClassCount] = {
        PickleWriter::kNoSlot, PickleWriter::kNoSlot, PickleWriter::kNoSlot, PickleWriter::kNoSlot,
        PickleWriter::kNoSlot, PickleWriter::kNoSlot, PickleWriter::kNoSlot, PickleWriter::kNoSlot,
        PickleWriter::kNoSlot, PickleWriter::kNoSlot};
    std::vector<std::string_view> m_parts;
    std::vector<const ObjectEntry *> m_objects;  ///< the stored ones
    std::vector<uint32_t> m_keySlot, m_fileSlot; ///< memo slots of each tensor's key and file
    std::vector<uint32_t> m_objectSlot;          ///< and of each stored object's key
    uint32_t m_fieldSlot[FieldCount];
    static constexpr size_t kDtypeSlots = 64;
    uint32_t m_dtypeSlot[kDtypeSlots];
    bool m_streaming = false;
};

} // namespace

std::string dcpMetadataPickle(const CheckpointIndex &index)
{
    return MetadataPickler(index).write();
}

Result<uint64_t> writeDcpMetadata(const CheckpointIndex &index, int fd, const std::string &path,
                                  size_t pieceBytes)
{
    // A bounded queue of pieces between the pickler (this thread) and the writer.
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<std::string> pieces;
    bool done = false;
    std::atomic<int> error = 0;
    uint64_t written = 0;
    std::thread writer([&] {
        for (;;) {
            std::string piece;
            {
                std::unique_lock lock(mutex);
                changed.wait(lock, [&] { return !pieces.empty() || done; });
                if (pieces.empty())
                    return;
                piece = std::move(pieces.front());
                pieces.pop_front();
            }
            changed.notify_all();
            for (size_t at = 0; at < piece.size() && !error;) {
                const ssize_t n = ::write(fd, piece.data() + at, piece.size() - at);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    error = n < 0 ? errno : EIO;
                    changed.notify_all();
                    break;
                }
                at += size_t(n);
                written += uint64_t(n);
            }
        }
    });
    constexpr size_t kQueued = 4;
    MetadataPickler pickler(index);
    pickler.setSink(
        [&](std::string &&piece) {
            std::unique_lock lock(mutex);
            changed.wait(lock, [&] { return pieces.size() < kQueued || error; });
            pieces.push_back(std::move(piece));
            changed.notify_all();
        },
        pieceBytes);
    pickler.write();
    {
        std::lock_guard lock(mutex);
        done = true;
    }
    changed.notify_all();
    writer.join();
    if (error)
        return makeError(Error::Code::Io,
                         std::string("cannot write: ") + std::strerror(error.load()))
            .inFile(path);
    return written;
}

} // namespace shardscope::detail
