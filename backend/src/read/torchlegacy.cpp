// SPDX-License-Identifier: MIT
// torch.save's legacy stream (torch < 1.6, and `_use_new_zipfile_serialization=False` since), read
// as torch.serialization._legacy_load reads it: the magic number, the protocol version and the
// system info, each a pickle; the object pickle, whose storages are persistent ids
// ('storage', type, key, location, numel, view); the pickled list of storage keys; then, for each
// key in that order, an int64 element count and the storage's bytes, both little-endian whatever
// the system info says (torch writes and reads them so).
#include "read/torchsave.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>

namespace shardscope::detail {

namespace {

// 0x1950a86a20f9469cfc6c, as pickle's LONG1 stores it.
constexpr std::array<uint8_t, 10> kMagic = {0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                            0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kProtocolVersion = 1001;

struct RootStorage
{
    int elementSize = 0;
    uint64_t nbytes = 0; ///< what the object pickle's numel says
    uint64_t offset = 0; ///< its record's bytes, once found
    bool read = false;
};

} // namespace

Result<TorchSavePayload> TorchSavePayload::openLegacy(std::span<const uint8_t> file, uint64_t base)
{
    // Offsets in errors are the file's: `base` plus where in `file`.
    auto fail = [&](Error::Code code, std::string msg, uint64_t fileOffset) {
        return makeError(code, "legacy torch.save: " + std::move(msg)).atOffset(fileOffset);
    };
    uint64_t at = 0;
    auto next = [&]() -> Result<PickleArena> {
        auto a = parsePickle(file.subspan(size_t(at)), base + at);
        if (a)
            at += a->length();
        return a;
    };

    auto magic = next();
    if (!magic)
        return magic.error();
    const std::string_view m = magic->kind(magic->root()) == NodeKind::BigInt
                                   ? magic->bytes(magic->root())
                                   : std::string_view();
    if (m.size() != kMagic.size() || std::memcmp(m.data(), kMagic.data(), kMagic.size()) != 0)
        return fail(Error::Code::Format, "invalid magic number; corrupt file?", base);
    const uint64_t versionAt = at;
    auto version = next();
    if (!version)
        return version.error();
    if (!version->isInt(version->root()) || version->integer(version->root()) != kProtocolVersion)
        return fail(Error::Code::Format,
                    "invalid protocol version: " +
                        version->toPyValue(version->root(), 2).summary(40),
                    base + versionAt);
    auto sysInfo = next(); // byte order and C type sizes: torch reads past them
    if (!sysInfo)
        return sysInfo.error();
    auto objects = next();
    if (!objects)
        return objects.error();
    const uint64_t keysAt = at;
    auto keys = next();
    if (!keys)
        return keys.error();

    TorchSavePayload p;
    p.m_legacy = true;
    p.m_base = base;
    p.m_arena = std::move(*objects);
    const PickleArena &a = p.m_arena;

    // The storages the objects reference, in the order torch meets them: the first reference to
    // a key fixes its element type and size.
    std::unordered_map<std::string, RootStorage> roots;
    struct View
    {
        std::string root, key;
        uint64_t offset, size;
        uint64_t at;
    };
    std::vector<View> views;
    for (uint64_t i = 0; i < a.nodeCount(); ++i) {
        const NodeId n = NodeId(i << 3);
        if (a.kind(n) != NodeKind::PersId)
            continue;
        const NodeId pid = a.persId(n);
        const uint64_t pidAt = a.offsetOf(n);
        if (a.kind(pid) != NodeKind::Tuple || a.size(pid) < 1 || !a.isStr(a.item(pid, 0)))
            return fail(Error::Code::Format, "persistent id is not a tuple naming its type", pidAt);
        const std::string_view type = a.bytes(a.item(pid, 0));
        if (type == "module")
            continue; // a pickled nn.Module's source check: nothing to read
        if (type != "storage")
            return fail(Error::Code::Format, "unknown saved id type: " + std::string(type), pidAt);
        const NodeId stype = a.item(pid, 1), key = a.item(pid, 2), numel = a.item(pid, 4);
        if (a.size(pid) < 5 || a.kind(stype) != NodeKind::Global || !a.isStr(key) ||
            !a.isInt(numel) || a.integer(numel) < 0)
            return fail(Error::Code::Format,
                        "persistent id is not ('storage', type, key, location, numel, view)",
                        pidAt);
        const std::string root(a.bytes(key));
        auto it = roots.find(root);
        if (it == roots.end()) {
            const auto dtype = dtypeFromStorageClass(a.globalName(stype));
            if (!dtype)
                return fail(Error::Code::Unsupported,
                            "storage class '" + std::string(a.globalName(stype)) +
                                "' (quantized or unknown)",
                            a.offsetOf(stype));
            RootStorage r;
            r.elementSize = elementSize(*dtype);
            if (__builtin_mul_overflow(uint64_t(a.integer(numel)), uint64_t(r.elementSize),
                                       &r.nbytes))
                return fail(Error::Code::Format, "storage '" + root + "' size overflows", pidAt);
            it = roots.emplace(root, r).first;
        }
        const NodeId view = a.item(pid, 5);
        if (view == kNil || a.kind(view) == NodeKind::None)
            continue;
        const NodeId vkey = a.item(view, 0), voff = a.item(view, 1), vsize = a.item(view, 2);
        if (a.kind(view) != NodeKind::Tuple || !a.isStr(vkey) || !a.isInt(voff) ||
            !a.isInt(vsize) || a.integer(voff) < 0 || a.integer(vsize) < 0)
            return fail(Error::Code::Format, "storage view is not (key, offset, size)", pidAt);
        const uint64_t es = uint64_t(it->second.elementSize);
        uint64_t off = 0, size = 0;
        if (__builtin_mul_overflow(uint64_t(a.integer(voff)), es, &off) ||
            __builtin_mul_overflow(uint64_t(a.integer(vsize)), es, &size))
            return fail(Error::Code::Format, "storage view size overflows", pidAt);
        views.push_back({root, std::string(a.bytes(vkey)), off, size, pidAt});
    }

    // The records follow the key list, in its order.
    const PickleArena &k = *keys;
    if (k.kind(k.root()) != NodeKind::List)
        return fail(Error::Code::Format, "storage key list is not a list", base + keysAt);
    Status st = Ok{};
    std::unordered_set<std::string> listed;
    k.forEachItem(k.root(), [&](NodeId item) {
        if (!st)
            return;
        if (!k.isStr(item)) {
            st = fail(Error::Code::Format, "storage key is not a string", k.offsetOf(item));
            return;
        }
        const std::string key(k.bytes(item));
        auto it = roots.find(key);
        if (it == roots.end() || !listed.insert(key).second) {
            st = fail(Error::Code::Format,
                      "storage key '" + key +
                          (it == roots.end() ? "' listed but no object uses it" : "' listed twice"),
                      k.offsetOf(item));
            return;
        }
        uint64_t count = 0;
        if (file.size() < at || file.size() - at < 8) {
            st = fail(Error::Code::Format,
                      "storage '" + key + "': file ends before its element count", base + at);
            return;
        }
        std::memcpy(&count, file.data() + at, 8); // little-endian, as static_assert'ed elsewhere
        uint64_t nbytes = 0;
        if (__builtin_mul_overflow(count, uint64_t(it->second.elementSize), &nbytes) ||
            nbytes != it->second.nbytes) {
            // torch: "storage has wrong byte size: expected <file> got <object pickle>"
            st = fail(Error::Code::Format,
                      "storage '" + key + "' has wrong byte size: its record holds " +
                          std::to_string(count) + " elements of " +
                          std::to_string(it->second.elementSize) +
                          " bytes, the object pickle says " + std::to_string(it->second.nbytes) +
                          " bytes",
                      base + at);
            return;
        }
        if (file.size() - at - 8 < nbytes) {
            st = fail(Error::Code::Format,
                      "storage '" + key + "': unexpected end of file, " +
                          std::to_string(nbytes - (file.size() - at - 8)) + " bytes missing",
                      base + at);
            return;
        }
        it->second.offset = at + 8;
        it->second.read = true;
        p.m_records[key] = {at + 8, nbytes};
        at += 8 + nbytes;
    });
    if (!st)
        return st.error();
    for (const View &v : views) {
        const RootStorage &r = roots.at(v.root);
        if (!r.read)
            continue; // the tensors on it say so
        if (v.offset > r.nbytes || v.size > r.nbytes - v.offset)
            return fail(Error::Code::Format,
                        "storage view '" + v.key + "' reaches past storage '" + v.root + "'", v.at);
        p.m_records.try_emplace(v.key, StorageRecord{r.offset + v.offset, v.size});
    }
    return p;
}

} // namespace shardscope::detail
