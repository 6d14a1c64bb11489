// SPDX-License-Identifier: MIT
#include "read/torchsave.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace shardscope::detail {

namespace {

// Flattened by position: lists and tuples, and sets (torch's weights-only load builds them
// from a list through builtins.set), in the order the file stores their items.
bool isSequence(NodeKind k)
{
    return k == NodeKind::List || k == NodeKind::Tuple || k == NodeKind::Set ||
           k == NodeKind::FrozenSet;
}

// A class or call that makes a tensor (or a storage, or a Parameter), in any form torch's
// weights-only load accepts: the ones read are unwrapped before this is asked.
bool isTensorMaker(std::string_view module, std::string_view name)
{
    return (module == "torch._utils" && name.starts_with("_rebuild_")) ||
           (module == "torch._tensor" && name.starts_with("_rebuild_")) ||
           (module == "torch.nn.parameter" && name == "Parameter") ||
           ((module == "torch" || module == "torch.cuda") &&
            (name.ends_with("Tensor") || name.ends_with("Storage")));
}

bool isRebuild(std::string_view module, std::string_view name)
{
    return (module == "torch._utils" &&
            (name == "_rebuild_tensor_v2" || name == "_rebuild_tensor_v3" ||
             name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state" ||
             name == "_rebuild_tensor")) ||
           (module == "torch._tensor" && name == "_rebuild_from_type_v2");
}

} // namespace

std::string keyText(const PickleArena &a, NodeId k)
{
    switch (a.kind(k)) {
    case NodeKind::Str:
        return std::string(a.bytes(k));
    case NodeKind::Int:
        return std::to_string(a.integer(k));
    case NodeKind::Bool:
        return a.integer(k) ? "True" : "False";
    case NodeKind::None:
        return "None";
    default:
        return a.toPyValue(k, 4).summary(60);
    }
}

Result<TorchSavePayload> TorchSavePayload::open(std::span<const uint8_t> file, uint64_t base)
{
    // The legacy format starts with a pickle's PROTO opcode; a zip archive with "PK".
    if (!file.empty() && file[0] == 0x80 && !looksLikeZip(file))
        return openLegacy(file, base);
    if (file.size() >= 263 && std::memcmp(file.data() + 257, "ustar", 5) == 0)
        return openTar(file, base);
    return openZip(file, base);
}

std::optional<StorageRecord> TorchSavePayload::storageRecord(const std::string &key) const
{
    if (m_legacy) {
        auto it = m_records.find(key);
        return it == m_records.end() ? std::nullopt : std::optional(it->second);
    }
    const ZipArchive::Record *rec = m_zip.find("data/" + key);
    return rec ? std::optional(StorageRecord{rec->offset, rec->size}) : std::nullopt;
}

Result<TorchSavePayload> TorchSavePayload::openZip(std::span<const uint8_t> archive, uint64_t base)
{
    SpanSource source(archive);
    return openZip(source, base);
}

Result<TorchSavePayload> TorchSavePayload::openZip(ByteSource &archive, uint64_t base)
{
    auto zip = ZipArchive::parse(archive, base);
    if (!zip)
        return zip.error();
    const ZipArchive::Record *pkl = zip->find("data.pkl");
    if (!pkl)
        return makeError(Error::Code::Format, "torch.save archive without data.pkl").atOffset(base);
    auto unreadable = [&](const ZipArchive::Record &r) {
        return makeError(Error::Code::Io, "record '" + r.name + "' could not be read")
            .atOffset(base + r.offset);
    };
    if (const ZipArchive::Record *bo = zip->find("byteorder")) {
        const uint8_t *b = archive.at(bo->offset, bo->size);
        if (!b)
            return unreadable(*bo);
        std::string_view order(reinterpret_cast<const char *>(b), size_t(bo->size));
        if (order != "little")
            return makeError(Error::Code::Unsupported,
                             "torch.save archive with byte order '" + std::string(order) + "'")
                .atOffset(base + bo->offset);
    }
    // Records torch's reader parses before any tensor: a file format version (".data/version",
    // else "version": a decimal of at least 1) and the storage alignment (Python's int()).
    auto text = [&](const ZipArchive::Record &r) -> std::optional<std::string_view> {
        const uint8_t *b = r.size <= 64 ? archive.at(r.offset, r.size) : nullptr;
        if (!b)
            return std::nullopt;
        return std::string_view(reinterpret_cast<const char *>(b), size_t(r.size));
    };
    auto isSpace = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    const ZipArchive::Record *version = zip->find(".data/version");
    if (!version)
        version = zip->find("version");
    if (!version)
        return makeError(Error::Code::Format,
                         "torch.save archive without a 'version' record (torch's reader raises)")
            .atOffset(base);
    {
        // caffe2::stoull: leading blanks, then digits; what follows them is ignored.
        auto t = text(*version);
        size_t i = 0, digits = 0;
        uint64_t value = 0;
        while (t && i < t->size() && isSpace((*t)[i]))
            ++i;
        while (t && i < t->size() && (*t)[i] >= '0' && (*t)[i] <= '9' && digits < 18) {
            value = value * 10 + uint64_t((*t)[i++] - '0');
            ++digits;
        }
        if (!digits || value < 1)
            return makeError(Error::Code::Format, "torch.save archive's record '" + version->name +
                                                      "' holds no file format version (torch's "
                                                      "reader raises)")
                .atOffset(base + version->offset);
    }
    if (const ZipArchive::Record *align = zip->find(".storage_alignment")) {
        // int(bytes): blanks around an optionally signed run of digits ('_' between them).
        auto t = text(*align);
        std::string_view v = t.value_or(std::string_view());
        while (!v.empty() && isSpace(v.front()))
            v.remove_prefix(1);
        while (!v.empty() && isSpace(v.back()))
            v.remove_suffix(1);
        if (!v.empty() && (v.front() == '+' || v.front() == '-'))
            v.remove_prefix(1);
        bool ok = !v.empty() && v.front() != '_' && v.back() != '_';
        for (size_t i = 0; ok && i < v.size(); ++i)
            ok = (v[i] >= '0' && v[i] <= '9') || (v[i] == '_' && v[i - 1] != '_');
        if (!ok)
            return makeError(Error::Code::Format,
                             "torch.save archive's record '.storage_alignment' holds no number "
                             "(torch's load raises)")
                .atOffset(base + align->offset);
    }
    // torch.load reports the archive's serialization id as a Python string.
    if (const ZipArchive::Record *id = zip->find(".data/serialization_id")) {
        const uint8_t *b = id->size <= 4096 ? archive.at(id->offset, id->size) : nullptr;
        if (!b || !isUtf8({reinterpret_cast<const char *>(b), size_t(id->size)}))
            return makeError(Error::Code::Format,
                             "torch.save archive's serialization id is not UTF-8 (torch's load "
                             "raises)")
                .atOffset(base + id->offset);
    }
    const uint8_t *pklBytes = archive.at(pkl->offset, pkl->size);
    if (!pklBytes)
        return unreadable(*pkl);
    auto arena = parsePickle({pklBytes, size_t(pkl->size)}, base + pkl->offset);
    if (!arena)
        return arena.error();
    TorchSavePayload p;
    p.m_zip = std::move(*zip);
    p.m_arena = std::move(*arena);
    p.m_base = base;
    return p;
}

NodeId TorchSavePayload::unwrapTensor(NodeId n, int depth) const
{
    const PickleArena &a = m_arena;
    if (n == kNil || depth > 8 || a.kind(n) != NodeKind::Object)
        return kNil;
    NodeId c = a.objClass(n);
    if (c == kNil || a.kind(c) != NodeKind::Global)
        return kNil;
    // torch.nn.Parameter(data, requires_grad), by NEWOBJ or REDUCE: the weights-only load
    // takes both.
    if (a.globalModule(c) == "torch.nn.parameter" && a.globalName(c) == "Parameter")
        return unwrapTensor(a.item(a.objArgs(n), 0), depth + 1);
    if (!isRebuild(a.globalModule(c), a.globalName(c)))
        return kNil;
    std::string_view name = a.globalName(c);
    NodeId args = a.objArgs(n);
    if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state")
        return unwrapTensor(a.item(args, 0), depth + 1);
    if (name == "_rebuild_from_type_v2") {
        // (func, type, args, state): the real rebuild is func(*args).
        NodeId func = a.item(args, 0);
        NodeId inner = a.item(args, 2);
        if (func == kNil || inner == kNil || a.kind(func) != NodeKind::Global)
            return kNil;
        if (a.globalName(func) == "_rebuild_tensor_v2" ||
            a.globalName(func) == "_rebuild_tensor_v3")
            return n; // handled in tensorSpec
        return kNil;
    }
    return n;
}

bool TorchSavePayload::isTensor(NodeId n) const
{
    return unwrapTensor(n) != kNil || tarTensor(n) != nullptr;
}

Result<TensorSpec> TorchSavePayload::tensorSpec(NodeId node) const
{
    const PickleArena &a = m_arena;
    if (const TensorSpec *t = tarTensor(node))
        return *t;
    NodeId n = unwrapTensor(node);
    auto bad = [&](std::string msg) {
        return makeError(Error::Code::Format, "tensor rebuild: " + std::move(msg))
            .atOffset(node == kNil ? a.baseOffset() : a.offsetOf(node));
    };
    if (n == kNil)
        return bad("not a tensor");
    std::string_view fn = a.globalName(a.objClass(n));
    NodeId args = a.objArgs(n);
    if (fn == "_rebuild_from_type_v2") {
        fn = a.globalName(a.item(args, 0));
        args = a.item(args, 2);
    }
    // _rebuild_tensor (torch < 0.4) takes (storage, offset, size, stride): v2's first four.
    if (args == kNil || a.kind(args) != NodeKind::Tuple || a.size(args) < 4)
        return bad("argument tuple too short");

    TensorSpec spec;
    NodeId storage = a.item(args, 0);
    if (a.kind(storage) != NodeKind::PersId)
        return bad("storage is not a persistent id");
    NodeId pid = a.persId(storage);
    if (a.kind(pid) != NodeKind::Tuple || a.size(pid) < 5 || !a.isStr(a.item(pid, 0)) ||
        a.bytes(a.item(pid, 0)) != "storage")
        return bad("persistent id is not ('storage', type, key, location, numel)");
    NodeId stype = a.item(pid, 1), skey = a.item(pid, 2);
    if (a.kind(stype) != NodeKind::Global || !a.isStr(skey))
        return bad("storage type or key malformed");
    spec.storageKey = std::string(a.bytes(skey));
    // Legacy views of a storage (torch < 1.0): (…, numel, (view_key, offset, size)).
    if (NodeId view = a.item(pid, 5); m_legacy && view != kNil && a.kind(view) == NodeKind::Tuple)
        spec.storageKey = std::string(a.bytes(a.item(view, 0)));

    if (fn == "_rebuild_tensor_v3") {
        NodeId dt = a.item(args, 6);
        if (dt == kNil || a.kind(dt) != NodeKind::Global)
            return bad("_rebuild_tensor_v3 without a dtype");
        spec.dtypeName = std::string(a.globalName(dt));
        spec.dtype = dtypeFromName(spec.dtypeName).value_or(DType::Unknown);
    } else {
        std::string_view sc = a.globalName(stype);
        auto dt = dtypeFromStorageClass(sc);
        if (!dt)
            return makeError(Error::Code::Unsupported,
                             "storage class '" + std::string(sc) + "' (quantized or unknown)")
                .atOffset(a.offsetOf(stype));
        spec.dtype = *dt;
        spec.dtypeName = std::string(dtypeName(*dt));
    }
    NodeId off = a.item(args, 1);
    if (!a.isInt(off))
        return bad("storage offset is not an int");
    spec.storageOffset = a.integer(off);
    auto shape = a.intTuple(a.item(args, 2));
    auto strides = a.intTuple(a.item(args, 3));
    if (!shape || !strides || shape->size() != strides->size())
        return bad("size/stride malformed");
    spec.shape = std::move(*shape);
    spec.strides = std::move(*strides);

    const std::optional<StorageRecord> rec = storageRecord(spec.storageKey);
    const std::string recordName = m_legacy ? "storage '" + spec.storageKey + "'"
                                            : "storage record 'data/" + spec.storageKey + "'";
    if (!rec)
        return bad(recordName +
                   (m_legacy ? " not among the file's storages" : " missing from the archive"));
    spec.recordOffset = rec->offset;
    spec.recordSize = rec->size;

    // Bounds: every element the view can reach lies inside the record.
    if (spec.storageOffset < 0)
        return bad("negative storage offset");
    const int es = elementSize(spec.dtype);
    bool empty = false;
    unsigned __int128 last = uint64_t(spec.storageOffset);
    for (size_t i = 0; i < spec.shape.size(); ++i) {
        if (spec.shape[i] < 0 || spec.strides[i] < 0)
            return bad("negative size or stride");
        if (spec.shape[i] == 0)
            empty = true;
        else
            last += (unsigned __int128)(spec.shape[i] - 1) * uint64_t(spec.strides[i]);
    }
    if (es > 0 && !empty && (last + 1) * unsigned(es) > rec->size)
        return makeError(Error::Code::Format,
                         "tensor view needs " +
                             std::to_string(uint64_t((last + 1) * unsigned(es))) + " bytes but " +
                             recordName + " has " + std::to_string(rec->size))
            .atOffset(m_base + rec->offset);
    return spec;
}

namespace {

void simplifyTensors(PyValue &v, int depth)
{
    if (depth > 256)
        return;
    if (v.kind == PyValue::Kind::Object &&
        (v.text == "torch._utils" || v.text == "torch._tensor") && isRebuild(v.text, v.name) &&
        !v.items.empty()) {
        PyValue *args = &v.items[0];
        if ((v.name == "_rebuild_parameter" || v.name == "_rebuild_parameter_with_state") &&
            !args->items.empty()) {
            PyValue inner = std::move(args->items[0]);
            simplifyTensors(inner, depth + 1);
            v = std::move(inner);
            return;
        }
        if (v.name == "_rebuild_from_type_v2" && args->items.size() > 2)
            args = &args->items[2];
        if (args->items.size() >= 4) {
            PyValue t;
            t.kind = PyValue::Kind::Tensor;
            const PyValue &pid = args->items[0];
            if (v.name == "_rebuild_tensor_v3" && args->items.size() > 6)
                t.text = args->items[6].name;
            else if (!pid.items.empty() && pid.items[0].items.size() > 1)
                t.text = std::string(dtypeName(
                    dtypeFromStorageClass(pid.items[0].items[1].name).value_or(DType::Unknown)));
            for (const PyValue &d : args->items[2].items)
                t.ints.push_back(d.integer);
            v = std::move(t);
            return;
        }
    }
    for (PyValue &c : v.items)
        simplifyTensors(c, depth + 1);
    for (auto &[k, c] : v.dict) {
        simplifyTensors(k, depth + 1);
        simplifyTensors(c, depth + 1);
    }
}

} // namespace

PyValue TorchSavePayload::toValue(NodeId n, int maxDepth) const
{
    PyValue v = m_arena.toPyValue(n, maxDepth);
    simplifyTensors(v, 0);
    return v;
}

bool TorchSavePayload::holdsTensorOrDict(NodeId n, int depth) const
{
    if (depth > 64)
        return false; // bounded recursion; deeper lists are shown as leaves
    if (!m_arena.isNode(n))
        return false; // ints, strings, None, the empty tuple
    if (m_holds.size() != m_arena.nodeCount())
        m_holds.assign(m_arena.nodeCount(), 0);
    uint8_t &memo = m_holds[m_arena.nodeIndex(n)];
    if (memo != 0)
        return memo == 3;
    bool found = isTensor(n) || m_arena.kind(n) == NodeKind::Dict;
    const NodeKind k = m_arena.kind(n);
    if (!found && isSequence(k)) {
        memo = 1; // a cycle back to here counts as "no"
        m_arena.forEachItem(n, [&](NodeId c) {
            if (!found)
                found = holdsTensorOrDict(c, depth + 1);
        });
    }
    m_holds[m_arena.nodeIndex(n)] = found ? 3 : 2;
    return found;
}

std::optional<NodeId> TorchSavePayload::firstRefusedGlobal() const
{
    const PickleArena &a = m_arena;
    // torch/_weights_only_unpickler.py's _get_allowed_globals() (torch 2.11), by kind: new
    // dtypes and storage or tensor classes come with new torch versions, so those go by shape.
    auto allowed = [](std::string_view module, std::string_view name) {
        if (module == "collections")
            return name == "OrderedDict" || name == "Counter";
        if (module == "torch._utils")
            return name.starts_with("_rebuild_");
        if (module == "torch._tensor")
            return name == "_rebuild_from_type_v2";
        if (module == "torch.nn.parameter")
            return name == "Parameter";
        if (module == "torch.serialization")
            return name == "_get_layout";
        if (module == "_codecs")
            return name == "encode";
        if (module == "builtins" || module == "__builtin__")
            return name == "bytearray" || name == "set" || name == "complex";
        if (module == "torch.storage")
            return name == "TypedStorage" || name == "UntypedStorage";
        if (module == "torch" || module == "torch.cuda")
            return name == "Size" || name == "Tensor" || name == "device" ||
                   name.ends_with("Storage") || name.ends_with("Tensor") ||
                   name.starts_with("per_tensor_") || name.starts_with("per_channel_") ||
                   dtypeFromName(name).has_value() ||
                   ((name.starts_with("int") || name.starts_with("uint")) && name.size() <= 5);
        return false;
    };
    for (uint64_t i = 0; i < a.nodeCount(); ++i) {
        const NodeId n = NodeId(i << 3);
        if (a.kind(n) == NodeKind::Global && !allowed(a.globalModule(n), a.globalName(n)))
            return n;
    }
    return std::nullopt;
}

std::optional<HiddenTensor> TorchSavePayload::hiddenTensor(NodeId leaf) const
{
    const PickleArena &a = m_arena;
    std::vector<NodeId> todo{leaf};
    std::vector<uint8_t> seen(a.nodeCount(), 0);
    auto maker = [&](NodeId n) -> std::string {
        const NodeId c = a.objClass(n);
        if (c == kNil || a.kind(c) != NodeKind::Global ||
            !isTensorMaker(a.globalModule(c), a.globalName(c)))
            return {};
        return std::string(a.globalModule(c)) + "." + std::string(a.globalName(c));
    };
    while (!todo.empty()) {
        const NodeId n = todo.back();
        todo.pop_back();
        if (!a.isNode(n) || seen[a.nodeIndex(n)])
            continue;
        seen[a.nodeIndex(n)] = 1;
        switch (a.kind(n)) {
        case NodeKind::PersId:
            return HiddenTensor{n, "a storage (persistent id)"};
        case NodeKind::Object: {
            if (isTensor(n))
                return HiddenTensor{n, "a tensor"};
            if (std::string m = maker(n); !m.empty())
                return HiddenTensor{n, "a tensor made by " + m};
            // Pushed in reverse, so that the first found is the first in the object.
            for (NodeId c : {a.objExtra(n), a.objState(n), a.objArgs(n), a.objClass(n)})
                if (c != kNil)
                    todo.push_back(c);
            break;
        }
        case NodeKind::Tuple:
        case NodeKind::List:
        case NodeKind::Dict:
        case NodeKind::Set:
        case NodeKind::FrozenSet: {
            const size_t at = todo.size();
            a.forEachItem(n, [&](NodeId c) { todo.push_back(c); });
            std::reverse(todo.begin() + std::ptrdiff_t(at), todo.end());
            break;
        }
        default:
            break;
        }
    }
    return std::nullopt;
}

void TorchSavePayload::flatten(
    const std::function<void(const std::vector<std::string> &, NodeId)> &leaf, int maxDepth) const
{
    std::vector<std::string> path;
    std::vector<uint8_t> visited(m_arena.nodeCount(), 0);
    flattenImpl(root(), path, maxDepth, visited, leaf);
}

void TorchSavePayload::flattenImpl(
    NodeId n, std::vector<std::string> &path, int depth, std::vector<uint8_t> &visited,
    const std::function<void(const std::vector<std::string> &, NodeId)> &leaf) const
{
    const PickleArena &a = m_arena;
    const NodeKind k = a.kind(n);
    // A container reached twice (shared or cyclic) is shown once; later references are leaves.
    if (depth <= 0 || isTensor(n) || (a.isNode(n) && visited[a.nodeIndex(n)])) {
        leaf(path, n);
        return;
    }
    if (k == NodeKind::Dict && a.size(n) > 0) {
        visited[a.nodeIndex(n)] = 1;
        // A key set twice (SETITEM over an earlier value: a repaired legacy rank file
        // reassigns `model`) holds its last value, as the dict torch.load builds does.
        std::vector<std::pair<std::string, NodeId>> pairs;
        a.forEachPair(
            n, [&](NodeId key, NodeId value) { pairs.emplace_back(keyText(a, key), value); });
        std::vector<uint8_t> kept(pairs.size(), 1);
        {
            std::unordered_map<std::string_view, size_t> last;
            last.reserve(pairs.size());
            for (size_t i = 0; i < pairs.size(); ++i)
                if (auto [it, fresh] = last.try_emplace(pairs[i].first, i); !fresh) {
                    kept[it->second] = 0;
                    it->second = i;
                }
        }
        for (size_t i = 0; i < pairs.size(); ++i) {
            if (!kept[i])
                continue;
            path.push_back(std::move(pairs[i].first));
            flattenImpl(pairs[i].second, path, depth - 1, visited, leaf);
            path.pop_back();
        }
        return;
    }
    if (isSequence(k) && a.size(n) > 0 && holdsTensorOrDict(n, 0)) {
        visited[a.nodeIndex(n)] = 1;
        int64_t i = 0;
        a.forEachItem(n, [&](NodeId value) {
            path.push_back(std::to_string(i++));
            flattenImpl(value, path, depth - 1, visited, leaf);
            path.pop_back();
        });
        return;
    }
    leaf(path, n);
}

} // namespace shardscope::detail
