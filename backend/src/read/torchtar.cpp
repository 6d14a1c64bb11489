// SPDX-License-Identifier: MIT
// torch.save's tar format (torch < 0.4), read as torch.serialization's legacy_load reads it:
// members `storages` (a pickled count, then per storage a pickled (key, location, type) and its
// int64 element count and bytes, then a pickled list of views (target, root, offset, numel)),
// `tensors` (a pickled count, then per tensor a pickled (key, storage key, type), int32 ndim,
// four bytes, ndim int64 sizes, ndim int64 strides, int64 storage offset) and `pickle` (the
// objects, whose tensors are persistent ids: their keys). torch itself reads it only with
// weights_only=False; nothing here executes anything.
#include "read/torchsave.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace shardscope::detail {

namespace {

struct Member
{
    uint64_t offset = 0, size = 0;
};

// ustar headers: name at 0 (100 bytes), size at 124 (12 octal digits), type at 156. PAX ('x',
// 'g') and GNU long-name ('L', 'K') headers only describe the next member: skipped.
Result<std::map<std::string, Member>> tarMembers(std::span<const uint8_t> file, uint64_t base)
{
    std::map<std::string, Member> members;
    uint64_t at = 0;
    while (at + 512 <= file.size()) {
        const uint8_t *h = file.data() + at;
        if (std::all_of(h, h + 512, [](uint8_t b) { return b == 0; }))
            break;
        uint64_t size = 0;
        int i = 124;
        while (i < 136 && h[i] == ' ') // some writers pad the octal digits with spaces
            ++i;
        for (; i < 136 && h[i] >= '0' && h[i] <= '7'; ++i) {
            if (size >> 60)
                return makeError(Error::Code::Format, "tar: member size overflows")
                    .atOffset(base + at + 124);
            size = size * 8 + uint64_t(h[i] - '0');
        }
        const uint64_t data = at + 512;
        if (size > file.size() - data)
            return makeError(Error::Code::Format,
                             "tar: member of " + std::to_string(size) + " bytes runs past the end")
                .atOffset(base + at);
        const char type = char(h[156]);
        if (type == '0' || type == '\0') {
            const char *name = reinterpret_cast<const char *>(h);
            members[std::string(name, strnlen(name, 100))] = {data, size};
        }
        at = data + (size + 511) / 512 * 512;
    }
    return members;
}

std::string keyOf(const PickleArena &a, NodeId n)
{
    return a.isInt(n) ? std::to_string(a.integer(n)) : std::string(a.isStr(n) ? a.bytes(n) : "");
}

} // namespace

const TensorSpec *TorchSavePayload::tarTensor(NodeId n) const
{
    if (m_tarTensors.empty() || n == kNil || m_arena.kind(n) != NodeKind::PersId)
        return nullptr;
    auto it = m_tarTensors.find(keyOf(m_arena, m_arena.persId(n)));
    return it == m_tarTensors.end() ? nullptr : &it->second;
}

Result<TorchSavePayload> TorchSavePayload::openTar(std::span<const uint8_t> file, uint64_t base)
{
    auto members = tarMembers(file, base);
    if (!members)
        return members.error();
    auto member = [&](const char *name) -> Result<Member> {
        auto it = members->find(name);
        if (it == members->end())
            return makeError(Error::Code::Format,
                             std::string("torch.save tar without its '") + name + "' member")
                .atOffset(base);
        return it->second;
    };
    auto fail = [&](std::string msg, uint64_t at) {
        return makeError(Error::Code::Format, "torch.save tar: " + std::move(msg))
            .atOffset(base + at);
    };
    // Pickles one after the other in a member; `at` is a file offset.
    auto next = [&](const Member &m, uint64_t &at) -> Result<PickleArena> {
        auto a = parsePickle(file.subspan(size_t(at), size_t(m.offset + m.size - at)), base + at);
        if (a)
            at += a->length();
        return a;
    };
    // A member's leading pickled count (of storages, of tensors).
    auto countAt = [&](const Member &m, uint64_t &at, const char *what) -> Result<int64_t> {
        const uint64_t from = at;
        auto count = next(m, at);
        if (!count)
            return count.error();
        if (!count->isInt(count->root()) || count->integer(count->root()) < 0)
            return fail(std::string(what) + " count is not a count", from);
        return count->integer(count->root());
    };
    auto int64At = [&](const Member &m, uint64_t at, int64_t &v) {
        if (at + 8 > m.offset + m.size)
            return false;
        std::memcpy(&v, file.data() + at, 8);
        return true;
    };

    // Storages: key → dtype, bytes.
    struct Storage
    {
        DType dtype = DType::Unknown;
        StorageRecord record;
    };
    std::unordered_map<std::string, Storage> storages;
    auto sm = member("storages");
    if (!sm)
        return sm.error();
    uint64_t at = sm->offset;
    auto storageCount = countAt(*sm, at, "storage");
    if (!storageCount)
        return storageCount.error();
    for (int64_t i = 0; i < *storageCount; ++i) {
        const uint64_t argsAt = at;
        auto args = next(*sm, at);
        if (!args)
            return args.error();
        const PickleArena &a = *args;
        const NodeId t = a.root(), type = a.item(t, 2);
        if (a.kind(t) != NodeKind::Tuple || a.size(t) != 3 || a.kind(type) != NodeKind::Global)
            return fail("storage header is not (key, location, type)", argsAt);
        const auto dtype = dtypeFromStorageClass(a.globalName(type));
        if (!dtype)
            return fail("storage class '" + std::string(a.globalName(type)) + "'", argsAt);
        int64_t n = 0;
        uint64_t bytes = 0;
        if (!int64At(*sm, at, n) || n < 0 ||
            __builtin_mul_overflow(uint64_t(n), uint64_t(elementSize(*dtype)), &bytes) ||
            bytes > sm->offset + sm->size - at - 8)
            return fail("storage '" + keyOf(a, a.item(t, 0)) + "': unexpected end of its bytes",
                        at);
        storages[keyOf(a, a.item(t, 0))] = {*dtype, {at + 8, bytes}};
        at += 8 + bytes;
    }
    auto views = next(*sm, at);
    if (!views)
        return views.error();
    Status st = Ok{};
    views->forEachItem(views->root(), [&](NodeId v) {
        const PickleArena &a = *views;
        if (!st)
            return;
        auto root = storages.find(keyOf(a, a.item(v, 1)));
        const NodeId off = a.item(v, 2), numel = a.item(v, 3);
        if (a.size(v) != 4 || root == storages.end() || !a.isInt(off) || !a.isInt(numel) ||
            a.integer(off) < 0 || a.integer(numel) < 0) {
            st = fail("storage view is not (target, root, offset, numel)", a.offsetOf(v) - base);
            return;
        }
        const uint64_t es = uint64_t(elementSize(root->second.dtype));
        const uint64_t o = uint64_t(a.integer(off)) * es, size = uint64_t(a.integer(numel)) * es;
        if (o > root->second.record.size || size > root->second.record.size - o) {
            st = fail("storage view reaches past its root", a.offsetOf(v) - base);
            return;
        }
        storages[keyOf(a, a.item(v, 0))] = {root->second.dtype,
                                            {root->second.record.offset + o, size}};
    });
    if (!st)
        return st.error();

    // Tensors: key → spec over its storage.
    TorchSavePayload p;
    p.m_legacy = true;
    p.m_base = base;
    auto tm = member("tensors");
    if (!tm)
        return tm.error();
    at = tm->offset;
    auto tensorCount = countAt(*tm, at, "tensor");
    if (!tensorCount)
        return tensorCount.error();
    for (int64_t i = 0; i < *tensorCount; ++i) {
        const uint64_t argsAt = at;
        auto args = next(*tm, at);
        if (!args)
            return args.error();
        const PickleArena &a = *args;
        const NodeId t = a.root();
        auto storage = storages.find(keyOf(a, a.item(t, 1)));
        if (a.kind(t) != NodeKind::Tuple || a.size(t) != 3 || storage == storages.end())
            return fail("tensor header is not (key, storage key, type) of a stored storage",
                        argsAt);
        int32_t ndim = 0;
        if (at + 8 > tm->offset + tm->size)
            return fail("tensor dimensions cut short", at);
        std::memcpy(&ndim, file.data() + at, 4);
        at += 8; // legacy encoding: ndim took 8 bytes
        if (ndim < 0 || ndim > 64 || (uint64_t(ndim) * 16 + 8) > tm->offset + tm->size - at)
            return fail("tensor of " + std::to_string(ndim) + " dimensions cut short", at - 8);
        TensorSpec spec;
        spec.dtype = storage->second.dtype;
        spec.dtypeName = std::string(dtypeName(spec.dtype));
        spec.shape.resize(size_t(ndim));
        spec.strides.resize(size_t(ndim));
        if (ndim > 0) { // a 0-d tensor: no sizes or strides (and no memcpy of a null vector)
            std::memcpy(spec.shape.data(), file.data() + at, size_t(ndim) * 8);
            std::memcpy(spec.strides.data(), file.data() + at + uint64_t(ndim) * 8,
                        size_t(ndim) * 8);
        }
        std::memcpy(&spec.storageOffset, file.data() + at + uint64_t(ndim) * 16, 8);
        at += uint64_t(ndim) * 16 + 8;
        spec.storageKey = keyOf(a, a.item(t, 1));
        spec.recordOffset = storage->second.record.offset;
        spec.recordSize = storage->second.record.size;
        // Every element the view reaches lies in the storage (as tensorSpec checks the others).
        unsigned __int128 last = uint64_t(std::max<int64_t>(spec.storageOffset, 0));
        bool empty = false;
        for (int d = 0; d < ndim; ++d) {
            if (spec.shape[size_t(d)] < 0 || spec.strides[size_t(d)] < 0)
                return fail("negative size or stride", argsAt);
            empty = empty || spec.shape[size_t(d)] == 0;
            if (spec.shape[size_t(d)] > 0)
                last += (unsigned __int128)(spec.shape[size_t(d)] - 1) *
                        uint64_t(spec.strides[size_t(d)]);
        }
        if (spec.storageOffset < 0 ||
            (!empty && (last + 1) * unsigned(elementSize(spec.dtype)) > spec.recordSize))
            return fail("tensor '" + keyOf(a, a.item(t, 0)) + "' reaches past its storage", argsAt);
        p.m_tarTensors[keyOf(a, a.item(t, 0))] = std::move(spec);
    }

    auto pm = member("pickle");
    if (!pm)
        return pm.error();
    auto objects =
        parsePickle(file.subspan(size_t(pm->offset), size_t(pm->size)), base + pm->offset);
    if (!objects)
        return objects.error();
    p.m_arena = std::move(*objects);
    return p;
}

} // namespace shardscope::detail
