// SPDX-License-Identifier: MIT
#include "read/itemloader.h"

#include "read/readers.h"

#include <filesystem>
#include <zstd.h>

namespace fs = std::filesystem;

namespace shardscope::detail {

namespace {

std::string mib(uint64_t n)
{
    return std::to_string((n + (1 << 20) - 1) >> 20) + " MiB";
}

// The caller bounds the output by what the item can need (a chunk's bytes): a frame that
// inflates past that is a bomb, refused before it takes the memory it claims.
Result<std::vector<uint8_t>> zstdDecompress(std::span<const uint8_t> in, uint64_t maxBytes)
{
    std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream *)> ds(ZSTD_createDStream(),
                                                                 ZSTD_freeDStream);
    if (!ds)
        return makeError(Error::Code::Internal, "zstd: out of memory");
    ZSTD_initDStream(ds.get());
    std::vector<uint8_t> out;
    // Grow as output appears; the declared content size (if any) is only a hint, never trusted.
    const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
    out.resize(size_t(std::min<uint64_t>(
        maxBytes, declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR &&
                          declared <= in.size() * 64 + (1 << 20)
                      ? declared
                      : std::max<size_t>(in.size() * 4, 1 << 16))));
    ZSTD_inBuffer ib{in.data(), in.size(), 0};
    size_t produced = 0;
    while (true) {
        if (produced == out.size()) {
            if (out.size() >= maxBytes)
                return makeError(Error::Code::Limit, "zstd: item inflates beyond " + mib(maxBytes) +
                                                         ", more than what it holds can need")
                    .atOffset(ib.pos);
            out.resize(std::min<uint64_t>(std::max<uint64_t>(out.size() * 2, 1), maxBytes));
        }
        ZSTD_outBuffer ob{out.data() + produced, out.size() - produced, 0};
        const size_t r = ZSTD_decompressStream(ds.get(), &ob, &ib);
        if (ZSTD_isError(r))
            return makeError(Error::Code::Format, std::string("zstd: ") + ZSTD_getErrorName(r))
                .atOffset(ib.pos);
        produced += ob.pos;
        if (r == 0 && ib.pos == ib.size)
            break;
        if (ib.pos == ib.size && ob.pos < ob.size)
            return makeError(Error::Code::Format, "zstd: stream ends inside a frame")
                .atOffset(ib.pos);
    }
    out.resize(produced);
    return out;
}

} // namespace

Result<std::shared_ptr<const MappedFile>> FileCache::get(uint32_t file)
{
    if (auto it = m_files.find(file); it != m_files.end())
        return it->second;
    if (file >= m_index.files.size())
        return makeError(Error::Code::Internal, "file index out of range");
    // Tensor data comes out with copyOut(): keep the descriptor (one operation's files at most).
    auto f =
        MappedFile::open((fs::path(m_index.dataDir) / m_index.files[file]).string(), false, true);
    if (!f)
        return f.error();
    m_files.emplace(file, *f);
    return *f;
}

Result<std::vector<uint8_t>> undoTransforms(std::span<const uint8_t> in,
                                            const std::vector<std::string> &chain,
                                            uint64_t maxBytes)
{
    std::vector<uint8_t> cur(in.begin(), in.end());
    // Descriptors are stored in reverse application order: undo them in list order.
    for (const std::string &d : chain) {
        const std::string name = d.substr(0, d.find_first_of("@/"));
        if (name == "stream.zstd") {
            auto r = zstdDecompress(cur, maxBytes);
            if (!r)
                return r.error();
            cur = std::move(*r);
        } else {
            return makeError(Error::Code::Unsupported, "unknown stream transform '" + d + "'");
        }
    }
    return cur;
}

Result<LoadedItem> loadItem(const CheckpointIndex &index, const Location &loc, FileCache &files,
                            uint64_t maxBytes)
{
    if (loc.file == kUnassigned)
        return makeError(Error::Code::Format, "item has no storage entry in the metadata");
    auto f = files.get(loc.file);
    if (!f)
        return f.error();
    auto range = (*f)->range(loc.offset, loc.length);
    if (!range)
        return range.error();
    LoadedItem item;
    item.file = *f;
    item.path = (*f)->path();
    const auto &chain = index.transformChains.at(loc.transforms);
    if (chain.empty()) {
        item.bytes = *range;
        item.base = loc.offset;
        return item;
    }
    // The stored bytes by pread(): a disk error is an error here, not SIGBUS in the mapping.
    std::vector<uint8_t> stored(range->size());
    if (Status st = (*f)->copyOut(*range, stored.data()); !st)
        return st.error();
    auto out = undoTransforms(stored, chain, maxBytes);
    if (!out) { // an offset inside the stored item becomes one in the file
        Error e = out.error();
        e.offset = loc.offset + e.offset.value_or(0);
        return e.inFile(item.path);
    }
    item.owned = std::move(*out);
    item.bytes = item.owned;
    return item;
}

} // namespace shardscope::detail
