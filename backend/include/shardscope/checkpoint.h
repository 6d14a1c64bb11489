// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/compact.h"
#include "shardscope/dtype.h"
#include "shardscope/pyvalue.h"
#include "shardscope/result.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

enum class Format : uint8_t {
    Dcp,                 ///< plain torch.distributed.checkpoint directory
    MegatronTorchDist,   ///< Megatron dist_checkpointing torch_dist (metadata.json + DCP)
    MegatronFsdpDtensor, ///< Megatron-FSDP fsdp_dtensor (DCP with model.module./optimizer.state.)
    MegatronLegacy,      ///< mp_rank_XX[_YYY]/model_optim_rng.pt files
    TorchSave,           ///< one torch.save zip archive (.pt, .bin)
    Safetensors,         ///< one .safetensors file
    SafetensorsIndex,    ///< model.safetensors.index.json and its shards
    TorchSaveIndex,      ///< pytorch_model.bin.index.json and its torch.save shards
};
std::string_view formatName(Format f);

/** How the bytes of a stored item are laid out. */
enum class Encoding : uint8_t {
    TorchSaveArchive, ///< a standalone torch.save zip (DCP items)
    RawStorage,       ///< raw little-endian elements, see TensorEntry::strides/storageOffset
};

/** Where one stored item lives. `file` indexes CheckpointIndex::files. */
struct Location
{
    uint32_t file = 0;
    uint16_t transforms = 0; ///< index into CheckpointIndex::transformChains; 0 = none
    Encoding encoding = Encoding::TorchSaveArchive;
    uint64_t offset = 0;
    uint64_t length = 0;
};

/**
 * The true nesting of a flattened key (DCP planner_data): its components. Kept compactly as
 * which of the key's dots separate components, since the components joined with '.' are the key
 * (650,000 keys of a big checkpoint would otherwise hold 1.5 million small strings); as explicit
 * strings when they are not. Default: every dot separates.
 */
class KeyPath
{
public:
    KeyPath() = default;
    static KeyPath fromParts(std::string_view key, std::span<const std::string_view> parts);
    static KeyPath fromParts(std::string_view key, const std::vector<std::string> &parts);
    /** True when the components are the key split at every dot. */
    bool splitsEveryDot() const { return m_explicit.empty() && m_dots == kEveryDot; }
    /** The components, as views into `key` (the entry's key) or into this object. */
    void partsInto(std::string_view key, std::vector<std::string_view> &out) const;
    std::vector<std::string> parts(std::string_view key) const;
    bool operator==(const KeyPath &) const = default;

    // The compact form as it is, for the persistent index: which dots separate, or the
    // explicit components (when there are any, the dots are not consulted).
    uint64_t dotMask() const { return m_dots; }
    const std::vector<std::string> &explicitParts() const { return m_explicit; }
    static KeyPath fromCompact(uint64_t dots, std::vector<std::string> parts)
    {
        KeyPath p;
        p.m_dots = dots;
        p.m_explicit = std::move(parts);
        return p;
    }

private:
    static constexpr uint64_t kEveryDot = ~uint64_t(0);
    uint64_t m_dots = kEveryDot; // bit i: the key's i-th dot separates (dots past 63 always do)
    std::vector<std::string> m_explicit;
};

/**
 * One tensor of the checkpoint: its global view and the chunks that store it. Its key, shape,
 * chunks and chunk dims are compact containers (shardscope/compact.h): read from the persistent
 * index they view its mapped file; their elements change only through their own calls.
 */
struct TensorEntry
{
    CompactString key; ///< flattened key as stored ("model.module.decoder.…")
    KeyPath path;      ///< true nesting (DCP planner_data)
    DType dtype = DType::Unknown;
    std::string dtypeName; ///< torch's name, kept even when dtype is Unknown
    CompactVector<int64_t> shape;
    CompactVector<Location> chunks;
    /** Per chunk: ndim offsets, then ndim sizes (flat, to keep 1.5 M chunks compact). */
    CompactVector<int64_t> chunkDims;
    /** RawStorage only (one chunk): element strides and storage offset, in elements. */
    std::vector<int64_t> strides;
    int64_t storageOffset = 0;

    size_t ndim() const { return shape.size(); }
    std::span<const int64_t> chunkOffsets(size_t i) const
    {
        return {chunkDims.data() + 2 * ndim() * i, ndim()};
    }
    std::span<const int64_t> chunkSizes(size_t i) const
    {
        return {chunkDims.data() + 2 * ndim() * i + ndim(), ndim()};
    }
    int64_t numel() const;
    uint64_t nbytes() const { return uint64_t(numel()) * uint64_t(elementSize(dtype)); }
};

/** A non-tensor entry (DCP BYTE_IO, or a leaf of a torch.save payload). Its key is compact
 *  like a tensor's (a big checkpoint has hundreds of thousands of optimizer-state objects). */
struct ObjectEntry
{
    CompactString key;
    KeyPath path;
    std::optional<Location> location;     ///< stored bytes (DCP BYTE_IO)
    std::shared_ptr<const PyValue> value; ///< already decoded (torch.save leaves)
};

/** Something wrong with the checkpoint that does not stop it from being read. */
struct Problem
{
    std::string key;
    std::string file;
    std::optional<uint64_t> offset;
    std::string message;
    /** What it does to a load of the key. */
    enum class Effect : uint8_t {
        Note,      ///< inconsistent metadata that a load passes over
        Holes,     ///< its chunks leave part of the tensor uncovered: a load leaves it unwritten
        Unreadable ///< reading its data fails (file missing, item cut short): a load raises
    } effect = Effect::Note;
    std::string toString() const;
};
/** "note", "holes" or "unreadable" (inspect --json). */
std::string_view effectName(Problem::Effect e);

/** Everything known about a checkpoint from its metadata, without its tensor data. */
struct CheckpointIndex
{
    Format format = Format::Dcp;
    std::string inputPath; ///< what the user named
    std::string dataDir;   ///< directory that `files` are relative to
    std::vector<std::string> files;
    std::vector<uint64_t> fileSizes; ///< as found when opened; UINT64_MAX = missing or unreadable
    /** Per file, what it is when it is there but not a regular file ("a FIFO (named pipe)");
     *  empty when regular or missing. Such a file is never opened. */
    std::vector<std::string> fileKinds;
    std::vector<std::vector<std::string>> transformChains{{}};
    std::vector<TensorEntry> tensors;
    std::vector<ObjectEntry> objects;
    /** Facts about the container: "dcp_version", "iteration", "sharded_backend", … */
    std::map<std::string, std::string> info;
    /** Found while opening (e.g. a metadata entry that names a missing file). */
    std::vector<Problem> problems;

    const TensorEntry *findTensor(std::string_view key) const;
    const ObjectEntry *findObject(std::string_view key) const;
    uint64_t chunkCount() const;

    /** Its items numbered as one list, tensors first, then objects (the numbering of
     *  DiffSource::entry). */
    size_t itemCount() const { return tensors.size() + objects.size(); }
    std::string_view itemKey(size_t item) const
    {
        return item < tensors.size() ? tensors[item].key.view()
                                     : objects[item - tensors.size()].key.view();
    }
};

struct OpenOptions
{
    /** Check every stored item against the files on disk (cheap: sizes only). */
    bool checkIntegrity = true;
    /**
     * A DCP .metadata is read in order: every key's name, nesting (planner data), shape, dtype
     * and chunk count is known after its first quarter, its storage locations only at the end.
     * Called once, on a reading thread, at that point, with the index so far: those fields are
     * final (the open may still fail), nothing else is. Nothing changes the index during the
     * call; do not keep references into it. Not called when the format has no such point (one
     * file read whole, rank-local metadata, a .metadata without planner data, an index read
     * from the persistent index).
     */
    std::function<void(const CheckpointIndex &keys)> onKeysKnown;
    /**
     * Read a DCP checkpoint's metadata through the persistent index (see docs/architecture.md):
     * built from the user's cache when the metadata files are unchanged, decoded and stored
     * otherwise. index.info["index_cache"] says which.
     */
    bool useCache = true;
    /** Threads for the metadata: 0 every core, 1 none beside the caller. The index is the same
     *  for any count. */
    int threads = 0;
    /** With checkIntegrity: check the structure of every stored item (checkItems), not a sample
     *  of a big checkpoint's. For jobs that read every item anyway (verify). */
    bool checkEveryItem = false;
};

/** Detects the format of `path` (file or directory) and reads its metadata. */
Result<CheckpointIndex> openCheckpoint(const std::string &path, const OpenOptions &options = {});

/** Returns once every persistent index entry this process began writing is written (a process
 *  waits for them when it exits normally; one that ends with _Exit must call this first). */
void waitForIndexWrites();

/** Every stored item checked against the files on disk: missing file, file too short. */
std::vector<Problem> checkIntegrity(const CheckpointIndex &index);

/**
 * Stored items whose bytes are not what the metadata says they are (a DCP item that is no
 * torch.save archive of its chunk, an object that is no torch.save stream, a transformed item
 * that does not begin its transform's frame): one `unreadable` problem per key, naming the data
 * file and the offset, as torch's load raises on them. A key index.problems already calls
 * unreadable (a file missing or cut short) keeps that one. Two reads of a few KiB per item, on
 * a few threads; the problems in the index's order whatever the thread count. `every` false:
 * all of a checkpoint's items up to 20,480, past that each data file's first and last item and
 * the first item of 1 key in (keys / 1,024), then every item of a file where one of those is
 * broken. `summary`, when given, says what was checked.
 */
std::vector<Problem> checkItems(const CheckpointIndex &index, bool every = false,
                                std::string *summary = nullptr);

/** Decodes a non-tensor entry through the safe pickle decoder. */
Result<PyValue> readObject(const CheckpointIndex &index, const ObjectEntry &entry);

} // namespace shardscope
