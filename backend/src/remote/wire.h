// SPDX-License-Identifier: MIT
// The remote protocol's bytes (docs/architecture.md, "Remote"): the server's ready line, then
// frames both ways on one stream. A frame is
//
//   u32 BE payload length | u8 kind | u32 BE request id | payload
//
// kind 0: a control message, a JSON object as UTF-8 text ({"type": "hello" | "request" |
// "progress" | "cancel" | "result" | "error" | "refused" | "release", …}); kind 1: a chunk of
// the blob the last control message of that id announced ({"blob": {"raw": BYTES}}),
// at most 4 MiB, so that progress and cancel interleave with a large transfer; kind 2: the
// blob's end, the XXH3-64 (BE) of its chunks' bytes. Every blob is zstd: one frame, or (minor 1,
// an index) several one after the other, one of which may be sent as it was kept. Whatever
// may hold bytes from a checkpoint (paths, keys, messages) travels in a blob as MessagePack,
// which keeps any byte string (JSON text would have to be UTF-8).
#pragma once

#include "shardscope/result.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace shardscope::detail::remote {

using json = nlohmann::json;

/** The wire's major version: a client and a server of different majors do not talk. The
 *  ready line and the hello never change shape, so that any two versions can say so. */
inline constexpr int kWireMajor = 1;
/** Minor versions add messages and fields; the lower of the two sides' is used. 1: an index's
 *  entry is sent ahead of the server's open ("entry"), in a frame of its own. */
inline constexpr int kWireMinor = 1;
/** The server's first line: "SHARDSCOPE-SERVE <major> <version>". */
inline constexpr std::string_view kReadyPrefix = "SHARDSCOPE-SERVE ";
/** Shell start-up output (.bashrc, a banner) skipped before the ready line, at most. */
inline constexpr size_t kMaxNoise = 64 << 10;
/** No frame is bigger: a blob is sent in chunks. */
inline constexpr uint32_t kFrameCap = 64 << 20;
inline constexpr size_t kBlobChunk = 4 << 20;
/** A blob decompressed is at most this (a DeepSeek-V3-scale index at 3.4 M chunks: 278 MiB). */
inline constexpr uint64_t kMaxBlobBytes = uint64_t(16) << 30;

enum class FrameKind : uint8_t { Control = 0, BlobChunk = 1, BlobEnd = 2 };

struct Frame
{
    FrameKind kind = FrameKind::Control;
    uint32_t id = 0;
    std::string payload;
};

/** Writes whole frames to a descriptor; several threads may send (one frame at a time). */
class FrameWriter
{
public:
    explicit FrameWriter(int fd)
        : m_fd(fd)
    {}
    /** Bytes as they are: the server's ready line, before any frame. */
    Status raw(std::string_view bytes);
    Status send(FrameKind kind, uint32_t id, std::string_view payload);
    Status control(uint32_t id, const json &message);
    /**
     * `message` with {"blob": {"raw": BYTES}} added, then `raw` zstd-compressed in chunks,
     * then its end. The frames of one blob go out under one lock
     * taken per frame, so another request's frames may come between its chunks.
     */
    Status controlWithBlob(uint32_t id, json message, std::string_view raw)
    {
        return controlWithBlob(id, std::move(message), {raw});
    }
    /** The same for a blob made of pieces, sent as one. */
    Status controlWithBlob(uint32_t id, json message,
                           std::initializer_list<std::string_view> pieces);
    /** One frame of a blob: `raw` compressed here (its frame put in `keepFrame` when that is
     *  set), or `frame`, a zstd frame of `rawSize` bytes compressed before, sent as it is. */
    struct Part
    {
        std::string_view raw;
        std::string *keepFrame = nullptr;
        std::string_view frame;
        uint64_t rawSize = 0;
    };
    /** `message` with its blob, the parts' frames one after the other (minor 1). */
    Status controlWithFrames(uint32_t id, json message, std::initializer_list<Part> parts);
    uint64_t bytesWritten() const { return m_bytes.load(); }

private:
    Status writeAll(const char *data, size_t size);
    int m_fd;
    std::mutex m_mutex;
    std::atomic<uint64_t> m_bytes{0};
};

/** Reads frames from a descriptor (one reader). */
class FrameReader
{
public:
    explicit FrameReader(int fd)
        : m_fd(fd)
    {}
    /** The next frame; an Io error "closed" at the end of the stream. */
    Result<Frame> next();
    /** While set, a read waits in steps of 100 ms and gives up (Error::Code::Cancelled) when
     *  this returns false: a connect's timeout and cancel. */
    void setWaiter(std::function<bool()> keepWaiting) { m_keepWaiting = std::move(keepWaiting); }
    /**
     * Before the first frame: the ready line, skipping up to kMaxNoise bytes of anything else
     * (a login banner, .bashrc output). Returns the line without its prefix ("1 0.9.0"); the
     * noise seen is in `noise` (its last line says why, when the server never starts).
     */
    Result<std::string> readyLine(std::string &noise);
    uint64_t bytesRead() const { return m_bytes.load(); }

private:
    Status readAll(char *data, size_t size);
    ssize_t readSome(char *data, size_t size);
    int m_fd;
    std::function<bool()> m_keepWaiting;
    std::string m_buffered; // read past the ready line
    std::atomic<uint64_t> m_bytes{0};
};

/** Bytes received: allocated once, at the size announced, its pages touched only as they are
 *  filled (a std::string would zero them all first, then copy them when it grows). */
class Bytes
{
public:
    Bytes() = default;
    explicit Bytes(size_t capacity)
        : m_data(capacity ? new char[capacity] : nullptr)
        , m_capacity(capacity)
    {}
    char *data() { return m_data.get(); }
    size_t size() const { return m_size; }
    size_t capacity() const { return m_capacity; }
    void setSize(size_t n) { m_size = n; }
    std::string_view view() const { return {m_data.get(), m_size}; }

private:
    std::unique_ptr<char[]> m_data;
    size_t m_capacity = 0, m_size = 0;
};

/** Receives one blob: chunks are checked and decompressed as they come. */
class BlobReceiver
{
public:
    explicit BlobReceiver(uint64_t raw);
    ~BlobReceiver();
    BlobReceiver(const BlobReceiver &) = delete;
    BlobReceiver &operator=(const BlobReceiver &) = delete;
    Status chunk(std::string_view bytes);
    /** At its end: the XXH3 the sender computed; the bytes when everything matches. */
    Result<Bytes> finish(std::string_view end);
    /** Bytes decompressed so far, of raw(). */
    uint64_t produced() const;
    uint64_t raw() const { return m_raw; }

private:
    Status decompress(std::string_view bytes);
    struct State;
    std::unique_ptr<State> m_state;
    uint64_t m_raw;
};

/** The JSON text of a control frame; an error naming what is wrong otherwise. */
Result<json> parseControl(std::string_view payload);

/** MessagePack of `j` (keeps any byte string), and back. */
std::string toPack(const json &j);
Result<json> fromPack(std::string_view bytes);

} // namespace shardscope::detail::remote
