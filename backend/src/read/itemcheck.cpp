// SPDX-License-Identifier: MIT
// checkItems(): each stored item's bytes against what the metadata says they are. A DCP data file
// zeroed, overwritten or replaced keeps its size, so the size check passes; the records each
// item begins and ends with do not. Read with pread(), two small reads per item.
#include "common/envint.h"
#include "common/regularfile.h"
#include "read/itemloader.h"
#include "read/readers.h"
#include "read/torchsave.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <filesystem>
#include <thread>
#include <unistd.h>
#include <unordered_set>

namespace fs = std::filesystem;

namespace shardscope {

using namespace detail;

namespace {

// Past 20 times this many items a sample of them is checked (see checkItems), up to it every
// one (two reads and a small parse each: tens of milliseconds). SHARDSCOPE_ITEM_SAMPLE sets it
// (tests: a small checkpoint sampled).
uint64_t spacedSamples()
{
    auto n = envInt("SHARDSCOPE_ITEM_SAMPLE", false, 1024);
    return n && *n > 0 ? uint64_t(*n) : 1024;
}
// What is read of each end of an item: torch.save's records before a tensor's bytes (data.pkl,
// the small records, the data record's header) and after them (two records and the central
// directory) take under 1 KiB each. More is read on demand (an object's big data.pkl), up to
// kMaxExtra; an item whose structure needs more is left to its read. (Most of a check's time
// is the kernel copying what was read: no more than that.)
constexpr uint64_t kEnd = 2048;
constexpr uint64_t kMaxExtra = uint64_t(64) << 20;

// An item's bytes as far as a check needs them: its two ends, and what else its structure asks
// for, read on demand.
class ItemSource final : public ByteSource
{
public:
    ItemSource(int fd, uint64_t offset, uint64_t length)
        : m_fd(fd)
        , m_offset(offset)
        , m_length(length)
    {
        if (length <= 2 * kEnd) {
            m_ok = read(0, length, m_head);
        } else {
            m_ok = read(0, kEnd, m_head) && read(length - kEnd, kEnd, m_tail);
        }
    }
    bool ok() const { return m_ok; }
    bool overBudget() const { return m_overBudget; }
    uint64_t size() const override { return m_length; }
    const uint8_t *at(uint64_t offset, uint64_t length) override
    {
        if (offset + length <= m_head.size())
            return m_head.data() + offset;
        if (!m_tail.empty() && offset >= m_length - m_tail.size())
            return m_tail.data() + (offset - (m_length - m_tail.size()));
        if (length > kMaxExtra - m_extraBytes) {
            m_overBudget = true;
            return nullptr;
        }
        std::vector<uint8_t> &more = m_extra.emplace_back();
        if (!read(offset, length, more))
            return nullptr;
        m_extraBytes += length;
        return more.data();
    }

private:
    bool read(uint64_t offset, uint64_t length, std::vector<uint8_t> &out)
    {
        out.resize(length);
        uint64_t done = 0;
        while (done < length) {
            const ssize_t r =
                ::pread(m_fd, out.data() + done, length - done, off_t(m_offset + offset + done));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return false;
            done += uint64_t(r);
        }
        return true;
    }
    int m_fd;
    uint64_t m_offset, m_length;
    std::vector<uint8_t> m_head, m_tail;
    std::deque<std::vector<uint8_t>> m_extra;
    uint64_t m_extraBytes = 0;
    bool m_ok = false, m_overBudget = false;
};

struct Item
{
    uint32_t entry; // a tensor's index, or tensors.size() + an object's
    uint32_t chunk;
    uint64_t offset; // within its file, for the order of reads
};

struct Failure
{
    uint32_t entry, chunk;
    uint64_t offset;
    std::string message;
};

uint64_t idOf(const Item &it)
{
    return (uint64_t(it.entry) << 32) | it.chunk;
}

std::vector<uint64_t> idsOf(const std::vector<Item> &items)
{
    std::vector<uint64_t> ids;
    ids.reserve(items.size());
    for (const Item &it : items)
        ids.push_back(idOf(it));
    std::sort(ids.begin(), ids.end());
    return ids;
}

const Location &locationOf(const CheckpointIndex &index, const Item &it)
{
    return it.entry < index.tensors.size()
               ? index.tensors[it.entry].chunks[it.chunk]
               : *index.objects[it.entry - index.tensors.size()].location;
}

bool isZstdFrame(const uint8_t *b)
{
    uint32_t magic;
    std::memcpy(&magic, b, 4);
    return magic == 0xFD2FB528u || (magic & 0xFFFFFFF0u) == 0x184D2A50u; // or a skippable one
}

// Why an item's bytes (`src`, at `base` in its file; 0 for bytes a transform produced) are not
// what the metadata says, or nothing.
std::optional<Error> checkBytes(ByteSource &src, uint64_t base, const CheckpointIndex &index,
                                const Item &it, const std::string &range)
{
    const bool tensor = it.entry < index.tensors.size();
    const uint64_t n = src.size();
    const bool zip = n >= 4 && looksLikeZip({src.at(0, 4), 4});
    if (!tensor && !zip) {
        // torch's load of an object (torch.load of its bytes) reads a zip archive or the legacy
        // stream, which begins with a pickle's PROTO.
        if (n >= 2 && src.at(0, 1)[0] == 0x80)
            return std::nullopt;
        return makeError(Error::Code::Format,
                         range + " is no torch.save archive (torch's load of the object raises)");
    }
    auto payload = TorchSavePayload::openZip(src, base);
    if (!payload) {
        Error e = payload.error();
        e.message = range + ": " + e.message;
        return e;
    }
    if (!tensor)
        return std::nullopt;
    const TensorEntry &t = index.tensors[it.entry];
    // DCP's read of a tensor item is torch.load(weights_only=True).
    if (auto g = payload->firstRefusedGlobal()) {
        const PickleArena &a = payload->arena();
        return makeError(Error::Code::Format, range + ": its pickle names " +
                                                  std::string(a.globalModule(*g)) + "." +
                                                  std::string(a.globalName(*g)) +
                                                  ", which torch's weights-only load refuses")
            .atOffset(a.offsetOf(*g));
    }
    auto spec = payload->tensorSpec(payload->root());
    if (!spec) {
        Error e = spec.error();
        e.message = range + ": " + e.message;
        return e;
    }
    const auto sizes = t.chunkSizes(it.chunk);
    if (spec->dtype != t.dtype ||
        !std::equal(spec->shape.begin(), spec->shape.end(), sizes.begin(), sizes.end()))
        return makeError(Error::Code::Format, range + ": stored chunk is " + spec->dtypeName +
                                                  " of another shape than the " + t.dtypeName +
                                                  " chunk the metadata describes");
    return std::nullopt;
}

// Why the item's bytes are not what the metadata says, or nothing. `every`: a transformed item
// is undone and its archive checked, as a read would (else only its frame's first bytes).
std::optional<Error> checkItem(int fd, FileCache &files, const CheckpointIndex &index,
                               const Item &it, bool every)
{
    const Location &l = locationOf(index, it);
    const std::string range =
        "item [" + std::to_string(l.offset) + ", +" + std::to_string(l.length) + ")";
    auto at = [&](std::optional<Error> e) {
        if (e && !e->offset)
            e->offset = l.offset;
        return e;
    };
    ItemSource src(fd, l.offset, l.length);
    if (!src.ok())
        return at(makeError(Error::Code::Io, range + " could not be read"));
    const auto &chain = index.transformChains.at(l.transforms);
    if (chain.empty()) {
        auto e = checkBytes(src, l.offset, index, it, range);
        return src.overBudget() ? std::nullopt : at(std::move(e));
    }
    // The outermost transform's own header, which needs nothing undone.
    if (chain.front().starts_with("stream.zstd") && (l.length < 4 || !isZstdFrame(src.at(0, 4))))
        return at(makeError(Error::Code::Format,
                            range + " does not begin a zstd frame, as its transform says"));
    if (!every)
        return std::nullopt;
    // What a read of it may inflate to (tensorread.cpp's bound), or an object's.
    uint64_t need = kMaxObjectInflated;
    if (it.entry < index.tensors.size()) {
        const TensorEntry &t = index.tensors[it.entry];
        uint64_t extent = uint64_t(elementSize(t.dtype));
        for (int64_t s : t.chunkSizes(it.chunk))
            if (__builtin_mul_overflow(extent, uint64_t(std::max<int64_t>(s, 0)), &extent))
                extent = UINT64_MAX;
        if (__builtin_mul_overflow(extent, uint64_t(2), &need) ||
            __builtin_add_overflow(need, uint64_t(1) << 20, &need))
            need = UINT64_MAX;
    }
    auto item = loadItem(index, l, files, need);
    if (!item) {
        Error e = item.error();
        e.message = range + ": " + e.message;
        return at(std::move(e));
    }
    SpanSource inflated(item->bytes);
    auto e = checkBytes(inflated, 0, index, it, range + " once undone");
    if (e)
        e->offset = l.offset; // offsets inside the undone bytes are not the file's
    return e;
}

// Checks `items` (grouped by file, each group in offset order) on a few threads, a file at a
// time; the failures in the items' order, whatever the thread count.
std::vector<Failure> checkAll(const CheckpointIndex &index, std::vector<Item> &items, bool every)
{
    std::stable_sort(items.begin(), items.end(), [&](const Item &a, const Item &b) {
        const uint32_t fa = locationOf(index, a).file, fb = locationOf(index, b).file;
        return fa != fb ? fa < fb : a.offset < b.offset;
    });
    std::vector<std::pair<size_t, size_t>> files; // [begin, end) of each file's items
    for (size_t i = 0; i < items.size();) {
        size_t j = i + 1;
        while (j < items.size() &&
               locationOf(index, items[j]).file == locationOf(index, items[i]).file)
            ++j;
        files.emplace_back(i, j);
        i = j;
    }
    std::vector<std::optional<Error>> results(items.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
        FileCache mapped(index); // transformed items undone (every)
        for (size_t f; (f = next++) < files.size();) {
            const uint32_t file = locationOf(index, items[files[f].first]).file;
            auto fd = openRegularFile((fs::path(index.dataDir) / index.files[file]).string());
            if (!fd)
                continue; // gone since the sizes were taken: the read says so
            for (size_t i = files[f].first; i < files[f].second; ++i)
                results[i] = checkItem(*fd, mapped, index, items[i], every);
            ::close(*fd);
        }
    };
    // Reads of the page cache, or of a disk that serves several at once: more threads than
    // cores help, up to a point.
    const size_t threads =
        std::min<size_t>(files.size(), std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t)
        pool.emplace_back(work);
    work();
    for (std::thread &t : pool)
        t.join();
    std::vector<Failure> out;
    for (size_t i = 0; i < items.size(); ++i)
        if (results[i])
            out.push_back({items[i].entry, items[i].chunk,
                           results[i]->offset.value_or(items[i].offset),
                           std::move(results[i]->message)});
    return out;
}

} // namespace

std::vector<Problem> checkItems(const CheckpointIndex &index, bool every, std::string *summary)
{
    return detail::checkItems(index, every, summary, nullptr);
}

std::vector<Problem> detail::checkItems(const CheckpointIndex &index, bool every,
                                        std::string *summary, const std::vector<FileEnds> *ends)
{
    // The items a check can read: DCP's (a torch.save archive each, or an object's bytes) in a
    // regular file that holds them whole. The rest is the size check's (checkIntegrity).
    auto checkable = [&](const Location &l) {
        if (l.file == kUnassigned || l.encoding != Encoding::TorchSaveArchive ||
            l.file >= index.fileSizes.size() || index.fileSizes[l.file] == UINT64_MAX)
            return false;
        const uint64_t size = index.fileSizes[l.file];
        return l.offset <= size && l.length <= size - l.offset;
    };
    const uint32_t tensors = uint32_t(index.tensors.size());
    auto forEachItem = [&](auto &&f) {
        for (uint32_t e = 0; e < tensors; ++e) {
            const TensorEntry &t = index.tensors[e];
            for (uint32_t c = 0; c < t.chunks.size(); ++c)
                if (checkable(t.chunks[c]) && !isEmptyChunk(t, c))
                    f(Item{e, c, t.chunks[c].offset});
        }
        for (uint32_t o = 0; o < index.objects.size(); ++o)
            if (const auto &l = index.objects[o].location; l && checkable(*l))
                f(Item{tensors + o, 0, l->offset});
    };

    // Up to 20 samples' worth of items every one is checked; counted only where the keys are
    // that few (a big checkpoint's 1.7 M chunks take a pass of their own to count).
    const uint64_t samples = spacedSamples(), entries = index.itemCount();
    uint64_t total = entries > 20 * samples ? UINT64_MAX : index.objects.size();
    for (size_t e = 0; total != UINT64_MAX && e < index.tensors.size(); ++e)
        total += index.tensors[e].chunks.size();
    const uint64_t stride = (entries + samples - 1) / samples;
    std::vector<Item> items;
    uint64_t candidates = 0;
    if (every || total <= 20 * samples) {
        forEachItem([&](const Item &it) { items.push_back(it); });
        candidates = items.size();
    } else {
        // One key in `stride` (its first item), in the index's order, and each data file's
        // first and last item (a file zeroed, replaced or cut short shows there).
        for (uint32_t e = 0; e < entries; e += uint32_t(stride)) {
            if (e >= tensors) {
                if (const auto &l = index.objects[e - tensors].location; l && checkable(*l))
                    items.push_back(Item{e, 0, l->offset});
                continue;
            }
            const TensorEntry &t = index.tensors[e];
            for (uint32_t c = 0; c < t.chunks.size(); ++c)
                if (checkable(t.chunks[c]) && !isEmptyChunk(t, c)) {
                    items.push_back(Item{e, c, t.chunks[c].offset});
                    break;
                }
        }
        // The ends: checkIntegrity's pass finds them; else a pass of their own.
        std::vector<FileEnds> own;
        if (!ends) {
            own.assign(index.files.size(), {});
            forEachItem([&](const Item &it) {
                own[locationOf(index, it).file].take(it.entry, it.chunk, it.offset);
            });
            ends = &own;
        }
        for (const FileEnds &e : *ends)
            candidates += e.items;
        std::vector<uint64_t> spaced = idsOf(items);
        for (const FileEnds &e : *ends)
            if (e.items)
                for (const Item &it : {Item{e.firstEntry, e.firstChunk, e.firstOffset},
                                       Item{e.lastEntry, e.lastChunk, e.lastOffset}})
                    if (!std::binary_search(spaced.begin(), spaced.end(), idOf(it)) &&
                        (items.empty() || idOf(items.back()) != idOf(it)))
                        items.push_back(it);
    }
    const uint64_t sampled = items.size();
    std::vector<Failure> failures = checkAll(index, items, every);

    // A file with a broken sample is checked whole: every key it breaks is named.
    bool whole = false;
    if (sampled < candidates && !failures.empty()) {
        std::vector<uint8_t> broken(index.files.size(), 0);
        for (const Failure &f : failures)
            broken[locationOf(index, Item{f.entry, f.chunk, 0}).file] = 1;
        std::vector<Item> rest;
        const std::vector<uint64_t> seen = idsOf(items);
        forEachItem([&](const Item &it) {
            if (broken[locationOf(index, it).file] &&
                !std::binary_search(seen.begin(), seen.end(), idOf(it)))
                rest.push_back(it);
        });
        std::vector<Failure> more = checkAll(index, rest, every);
        failures.insert(failures.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
        whole = true;
    }
    if (summary)
        *summary = sampled == candidates
                       ? "every item (" + std::to_string(candidates) + ")"
                       : std::to_string(sampled) + " of " + std::to_string(candidates) +
                             " items: each data file's first and last, and the first of 1 "
                             "key in " +
                             std::to_string(stride) +
                             (whole ? "; the files with a broken one whole" : "");

    // One problem per key, its first broken item, in the index's order.
    std::sort(failures.begin(), failures.end(), [](const Failure &a, const Failure &b) {
        return a.entry != b.entry ? a.entry < b.entry : a.chunk < b.chunk;
    });
    std::unordered_set<std::string_view> already; // a key keeps the one problem it has
    for (const Problem &p : index.problems)
        if (p.effect == Problem::Effect::Unreadable)
            already.insert(p.key);
    std::vector<Problem> out;
    for (size_t i = 0; i < failures.size(); ++i) {
        const Failure &f = failures[i];
        if ((i > 0 && failures[i - 1].entry == f.entry) || already.contains(index.itemKey(f.entry)))
            continue;
        const Location &l = locationOf(index, Item{f.entry, f.chunk, 0});
        out.push_back({std::string(index.itemKey(f.entry)),
                       (fs::path(index.dataDir) / index.files[l.file]).string(), f.offset,
                       f.message, Problem::Effect::Unreadable});
    }
    return out;
}

} // namespace shardscope
