// SPDX-License-Identifier: MIT
#include "remote/wire.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>
#include <xxhash.h>
#include <zstd.h>

namespace shardscope::detail::remote {

namespace {

constexpr size_t kHeader = 9;

void putBe32(char *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        p[i] = char(uint8_t(v >> (24 - 8 * i)));
}

uint32_t getBe32(const char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v = (v << 8) | uint8_t(p[i]);
    return v;
}

std::string be64(uint64_t v)
{
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i)
        s[i] = char(uint8_t(v >> (56 - 8 * i)));
    return s;
}

Error wireError(std::string message)
{
    return makeError(Error::Code::Io, std::move(message));
}

} // namespace

Status FrameWriter::writeAll(const char *data, size_t size)
{
    while (size) {
        // A socket (the client's end of ssh) would raise SIGPIPE once ssh is gone: an error
        // value instead. A pipe (the server's stdout) has SIGPIPE ignored by the server.
        ssize_t n = ::send(m_fd, data, size, MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK)
            n = ::write(m_fd, data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return wireError(std::string("the connection is closed (") + std::strerror(errno) +
                             ")");
        data += n;
        size -= size_t(n);
        m_bytes += uint64_t(n);
    }
    return Ok{};
}

Status FrameWriter::raw(std::string_view bytes)
{
    std::lock_guard lock(m_mutex);
    return writeAll(bytes.data(), bytes.size());
}

Status FrameWriter::send(FrameKind kind, uint32_t id, std::string_view payload)
{
    if (payload.size() > kFrameCap)
        return makeError(Error::Code::Limit,
                         "a frame of " + std::to_string(payload.size()) + " bytes, over the cap");
    char header[kHeader];
    putBe32(header, uint32_t(payload.size()));
    header[4] = char(kind);
    putBe32(header + 5, id);
    std::lock_guard lock(m_mutex);
    if (auto s = writeAll(header, kHeader); !s)
        return s;
    return writeAll(payload.data(), payload.size());
}

Status FrameWriter::control(uint32_t id, const json &message)
{
    // Control messages hold only ASCII of ours; strings from files travel in blobs.
    return send(FrameKind::Control, id,
                message.dump(-1, ' ', false, json::error_handler_t::replace));
}

Status FrameWriter::controlWithBlob(uint32_t id, json message,
                                    std::initializer_list<std::string_view> pieces)
{
    uint64_t raw = 0;
    for (std::string_view p : pieces)
        raw += p.size();
    message["blob"] = {{"raw", raw}};
    if (auto s = control(id, message); !s)
        return s;
    // Level 3 on one thread: a DeepSeek-V3-scale index (194 MiB) in 0.25 s to 7 MiB; more
    // threads were slower on a two-core machine, lower levels no faster (bench/README.md).
    std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx *)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setPledgedSrcSize(cctx.get(), raw);
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t *)> hash(XXH3_createState(),
                                                                          XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    std::string out(kBlobChunk, '\0');
    size_t used = 0; // chunks go out full, but for the last
    auto flush = [&]() -> Status {
        if (!used)
            return Ok{};
        XXH3_64bits_update(hash.get(), out.data(), used);
        const Status s = send(FrameKind::BlobChunk, id, std::string_view(out.data(), used));
        used = 0;
        return s;
    };
    std::vector<std::string_view> parts(pieces);
    if (parts.empty())
        parts.emplace_back();
    for (size_t i = 0; i < parts.size(); ++i) {
        ZSTD_inBuffer in{parts[i].data(), parts[i].size(), 0};
        const ZSTD_EndDirective mode = i + 1 == parts.size() ? ZSTD_e_end : ZSTD_e_continue;
        for (bool done = false; !done;) {
            ZSTD_outBuffer o{out.data(), out.size(), used};
            const size_t left = ZSTD_compressStream2(cctx.get(), &o, &in, mode);
            if (ZSTD_isError(left))
                return makeError(Error::Code::Internal,
                                 std::string("zstd: ") + ZSTD_getErrorName(left));
            used = o.pos;
            done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
            if (used == out.size())
                if (auto s = flush(); !s)
                    return s;
        }
    }
    if (auto s = flush(); !s)
        return s;
    return send(FrameKind::BlobEnd, id, be64(XXH3_64bits_digest(hash.get())));
}

Status FrameWriter::controlWithFrames(uint32_t id, json message, std::initializer_list<Part> parts)
{
    uint64_t raw = 0;
    for (const Part &p : parts)
        raw += p.frame.empty() ? p.raw.size() : p.rawSize;
    message["blob"] = {{"raw", raw}};
    if (auto s = control(id, message); !s)
        return s;
    std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx *)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t *)> hash(XXH3_createState(),
                                                                          XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    std::string out(kBlobChunk, '\0');
    size_t used = 0; // chunks go out full, but for the last
    auto put = [&](std::string_view bytes) -> Status {
        while (!bytes.empty()) {
            const size_t n = std::min(bytes.size(), out.size() - used);
            std::memcpy(out.data() + used, bytes.data(), n);
            used += n;
            bytes.remove_prefix(n);
            if (used == out.size()) {
                XXH3_64bits_update(hash.get(), out.data(), used);
                used = 0;
                if (auto s = send(FrameKind::BlobChunk, id, out); !s)
                    return s;
            }
        }
        return Ok{};
    };
    for (const Part &p : parts) {
        if (!p.frame.empty()) {
            if (auto s = put(p.frame); !s)
                return s;
            continue;
        }
        // Level 3 on one thread, as controlWithBlob.
        ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
        ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 3);
        ZSTD_CCtx_setPledgedSrcSize(cctx.get(), p.raw.size());
        std::string piece(1 << 20, '\0');
        ZSTD_inBuffer in{p.raw.data(), p.raw.size(), 0};
        for (size_t left = 1; left;) {
            ZSTD_outBuffer o{piece.data(), piece.size(), 0};
            left = ZSTD_compressStream2(cctx.get(), &o, &in, ZSTD_e_end);
            if (ZSTD_isError(left))
                return makeError(Error::Code::Internal,
                                 std::string("zstd: ") + ZSTD_getErrorName(left));
            const std::string_view made(piece.data(), o.pos);
            if (p.keepFrame)
                p.keepFrame->append(made);
            if (auto s = put(made); !s)
                return s;
        }
    }
    if (used) {
        XXH3_64bits_update(hash.get(), out.data(), used);
        if (auto s = send(FrameKind::BlobChunk, id, std::string_view(out.data(), used)); !s)
            return s;
    }
    return send(FrameKind::BlobEnd, id, be64(XXH3_64bits_digest(hash.get())));
}

ssize_t FrameReader::readSome(char *data, size_t size)
{
    while (m_keepWaiting) {
        pollfd p{m_fd, POLLIN, 0};
        const int r = ::poll(&p, 1, 100);
        if (r > 0)
            break;
        if (r < 0 && errno != EINTR)
            return -1;
        if (!m_keepWaiting()) {
            errno = ECANCELED;
            return -1;
        }
    }
    return ::read(m_fd, data, size);
}

Status FrameReader::readAll(char *data, size_t size)
{
    const size_t buffered = std::min(size, m_buffered.size());
    if (buffered) {
        std::memcpy(data, m_buffered.data(), buffered);
        m_buffered.erase(0, buffered);
        data += buffered;
        size -= buffered;
    }
    while (size) {
        const ssize_t n = readSome(data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ECANCELED)
            return makeError(Error::Code::Cancelled, "stopped waiting");
        if (n < 0)
            return wireError(std::string("reading the connection failed: ") + std::strerror(errno));
        if (n == 0)
            return wireError("closed");
        data += n;
        size -= size_t(n);
        m_bytes += uint64_t(n);
    }
    return Ok{};
}

Result<Frame> FrameReader::next()
{
    char header[kHeader];
    if (auto s = readAll(header, kHeader); !s)
        return s.error();
    Frame f;
    const uint32_t length = getBe32(header);
    f.kind = FrameKind(uint8_t(header[4]));
    f.id = getBe32(header + 5);
    if (uint8_t(f.kind) > uint8_t(FrameKind::BlobEnd))
        return makeError(Error::Code::Format,
                         "a frame of unknown kind " + std::to_string(uint8_t(header[4])) +
                             " (the stream is out of step, or not ShardScope's)");
    if (length > kFrameCap)
        return makeError(Error::Code::Limit, "a frame of " + std::to_string(length) +
                                                 " bytes, over the cap of " +
                                                 std::to_string(kFrameCap));
    f.payload.resize(length);
    if (auto s = readAll(f.payload.data(), length); !s)
        return s.error();
    return f;
}

Result<std::string> FrameReader::readyLine(std::string &noise)
{
    std::string line;
    char c[4096];
    for (;;) {
        // The ready line starts a line: take whole lines as they come.
        size_t nl;
        while ((nl = m_buffered.find('\n')) != std::string::npos) {
            line = m_buffered.substr(0, nl);
            m_buffered.erase(0, nl + 1);
            if (line.starts_with(kReadyPrefix))
                return line.substr(kReadyPrefix.size());
            noise += line + "\n";
        }
        if (noise.size() + m_buffered.size() > kMaxNoise)
            return makeError(Error::Code::Format,
                             "no ShardScope server answered: " +
                                 std::to_string(noise.size() + m_buffered.size()) +
                                 " bytes of other output came first");
        const ssize_t n = readSome(c, sizeof c);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == ECANCELED)
            return makeError(Error::Code::Cancelled, "stopped waiting");
        if (n <= 0) {
            noise += m_buffered;
            return wireError("closed");
        }
        m_bytes += uint64_t(n);
        m_buffered.append(c, size_t(n));
    }
}

struct BlobReceiver::State
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    XXH3_state_t *hash = XXH3_createState();
    Bytes out;
    bool frameDone = false;
    ~State()
    {
        ZSTD_freeDCtx(dctx);
        XXH3_freeState(hash);
    }
};

BlobReceiver::BlobReceiver(uint64_t raw)
    : m_state(std::make_unique<State>())
    , m_raw(raw)
{
    XXH3_64bits_reset(m_state->hash);
    // One byte past what was announced: zstd, never short of room, says where the frame ends;
    // a blob that fills that byte is longer than it said. Pages are only touched as written.
    if (raw <= kMaxBlobBytes)
        m_state->out = Bytes(size_t(raw) + 1);
}

BlobReceiver::~BlobReceiver() = default;

uint64_t BlobReceiver::produced() const
{
    return m_state->out.size();
}

Status BlobReceiver::chunk(std::string_view bytes)
{
    if (m_raw > kMaxBlobBytes)
        return makeError(Error::Code::Limit,
                         "a blob of " + std::to_string(m_raw) + " bytes, over the limit");
    XXH3_64bits_update(m_state->hash, bytes.data(), bytes.size());
    return decompress(bytes);
}

Status BlobReceiver::decompress(std::string_view bytes)
{
    State &s = *m_state;
    ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
    // Several frames one after the other (minor 1) decode as one stream: zstd starts the next
    // frame itself.
    for (;;) {
        ZSTD_outBuffer o{s.out.data(), s.out.capacity(), s.out.size()};
        const size_t before = in.pos, had = o.pos;
        const size_t r = ZSTD_decompressStream(s.dctx, &o, &in);
        if (ZSTD_isError(r))
            return makeError(Error::Code::Format,
                             std::string("a blob does not decompress: ") + ZSTD_getErrorName(r));
        s.out.setSize(o.pos);
        s.frameDone = r == 0;
        if (o.pos > m_raw)
            return makeError(Error::Code::Format, "a blob is longer than the " +
                                                      std::to_string(m_raw) +
                                                      " bytes it announced");
        if (in.pos == in.size && o.pos < o.size)
            break; // all taken, and zstd holds nothing back
        if (o.pos == had && in.pos == before) {
            if (in.pos < in.size)
                return makeError(Error::Code::Format, "a blob is longer than the " +
                                                          std::to_string(m_raw) +
                                                          " bytes it announced");
            break;
        }
    }
    return Ok{};
}

Result<Bytes> BlobReceiver::finish(std::string_view end)
{
    if (end.size() != 8)
        return makeError(Error::Code::Format,
                         "a blob's end of " + std::to_string(end.size()) + " bytes, not 8");
    uint64_t sent = 0;
    for (char c : end)
        sent = (sent << 8) | uint8_t(c);
    if (sent != XXH3_64bits_digest(m_state->hash))
        return makeError(Error::Code::Format, "a blob's checksum does not match its bytes");
    if (!m_state->frameDone) // what zstd still holds
        if (auto s = decompress({}); !s)
            return s.error();
    if (m_state->out.size() != m_raw || !m_state->frameDone)
        return makeError(Error::Code::Format, "a blob of " + std::to_string(m_state->out.size()) +
                                                  " bytes, " + std::to_string(m_raw) +
                                                  " announced");
    return std::move(m_state->out);
}

Result<json> parseControl(std::string_view payload)
{
    json j = json::parse(payload, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string())
        return makeError(Error::Code::Format, "a control frame that is not a JSON object with "
                                              "a \"type\"");
    return j;
}

std::string toPack(const json &j)
{
    std::string out;
    json::to_msgpack(j, out);
    return out;
}

Result<json> fromPack(std::string_view bytes)
{
    json j = json::from_msgpack(bytes, true, false);
    if (j.is_discarded())
        return makeError(Error::Code::Format, "a blob that is not MessagePack");
    return j;
}

} // namespace shardscope::detail::remote
