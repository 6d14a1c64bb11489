// SPDX-License-Identifier: MIT
#pragma once

#include "read/pickle.h"
#include "read/ziparchive.h"
#include "shardscope/dtype.h"

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace shardscope::detail {

/** A tensor as data.pkl describes it: where its storage record is and how to view it. */
struct TensorSpec
{
    DType dtype = DType::Unknown;
    std::string dtypeName;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    int64_t storageOffset = 0;
    std::string storageKey;
    uint64_t recordOffset = 0; ///< storage record data, relative to the file or archive start
    uint64_t recordSize = 0;
};

/** Where a storage's bytes are, relative to the start of the file or archive. */
struct StorageRecord
{
    uint64_t offset = 0;
    uint64_t size = 0;
};

/** Tensor data inside a value that is not flattened (see TorchSavePayload::hiddenTensor). */
struct HiddenTensor
{
    NodeId at = kNil; ///< the storage reference or tensor call found first
    std::string what;
};

/**
 * One torch.save file: its storage records and its decoded object pickle. Either the zip archive
 * of torch >= 1.6 (data.pkl, data/<key>) or the legacy stream of older torch (and of
 * `_use_new_zipfile_serialization=False`): five pickles, then each storage's bytes. References
 * the bytes it was opened over; keep them alive.
 */
class TorchSavePayload
{
public:
    /** Any of the three formats (zip, legacy stream, tar of torch < 0.4), by its first bytes. */
    static Result<TorchSavePayload> open(std::span<const uint8_t> file, uint64_t base = 0);
    /** A zip archive (torch >= 1.6) over a source that need not hold all of it: only its
     *  records' structure and data.pkl are read. The source must outlive the payload. */
    static Result<TorchSavePayload> openZip(ByteSource &archive, uint64_t base = 0);

    bool isLegacy() const { return m_legacy; }
    const PickleArena &arena() const { return m_arena; }
    NodeId root() const { return m_arena.root(); }

    /** True when the node is a tensor rebuild (plain, v3, Parameter, typed subclass). */
    bool isTensor(NodeId n) const;
    Result<TensorSpec> tensorSpec(NodeId n) const;
    /** An inert value with tensors shown as PyValue::Kind::Tensor. */
    PyValue toValue(NodeId n, int maxDepth = 64) const;

    /** The first global torch's weights-only load refuses (DCP reads a tensor item so). */
    std::optional<NodeId> firstRefusedGlobal() const;

    /**
     * The first tensor, storage or tensor-making call inside a leaf of flatten() that is not
     * itself a tensor read here (a call or class instance the decoder keeps as it is, a tensor
     * of a form not read): its tensors would otherwise go unlisted.
     */
    std::optional<HiddenTensor> hiddenTensor(NodeId leaf) const;

    /**
     * Walks nested dicts (and lists or tuples that hold tensors or dicts) as torch's flattening
     * does, calling leaf(path, node) for tensors and for every other leaf.
     */
    void flatten(const std::function<void(const std::vector<std::string> &, NodeId)> &leaf,
                 int maxDepth = 64) const;

private:
    static Result<TorchSavePayload> openZip(std::span<const uint8_t> archive, uint64_t base);
    static Result<TorchSavePayload> openLegacy(std::span<const uint8_t> file, uint64_t base);
    static Result<TorchSavePayload> openTar(std::span<const uint8_t> file, uint64_t base);
    /** The tar format's tensors: persistent ids (their keys) resolved by the `tensors` member. */
    const TensorSpec *tarTensor(NodeId n) const;
    std::optional<StorageRecord> storageRecord(const std::string &key) const;
    NodeId unwrapTensor(NodeId n, int depth = 0) const;
    bool holdsTensorOrDict(NodeId n, int depth = 0) const;
    void
    flattenImpl(NodeId n, std::vector<std::string> &path, int depth, std::vector<uint8_t> &visited,
                const std::function<void(const std::vector<std::string> &, NodeId)> &leaf) const;

    ZipArchive m_zip;
    PickleArena m_arena;
    bool m_legacy = false;
    uint64_t m_base = 0;
    std::unordered_map<std::string, StorageRecord> m_records; // legacy: by storage (or view) key
    std::unordered_map<std::string, TensorSpec> m_tarTensors; // tar format: by tensor key
    // Per node: 0 unknown, 1 in progress, 2 no, 3 yes. Memoised so shared or cyclic
    // containers cost one visit.
    mutable std::vector<uint8_t> m_holds;
};

/** Key text for a dict key or list index node, as str() would give it. */
std::string keyText(const PickleArena &a, NodeId k);

} // namespace shardscope::detail
