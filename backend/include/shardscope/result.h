// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace shardscope {

/** An error as a value: what went wrong, and where (file, key, byte offset) when known. */
struct Error
{
    enum class Code {
        Io,          ///< the file system refused (missing file, permission, short read)
        Format,      ///< bytes do not follow the format
        Unsupported, ///< valid, but a variant we do not read
        Unsafe,      ///< the input asks for something we never do (execute code)
        Limit,       ///< a declared size or nesting depth beyond our bounds
        NotFound,    ///< a key or entry that is not there
        Cancelled,
        Internal,
    };
    Code code = Code::Internal;
    std::string message;
    std::string file;
    std::string key;
    std::optional<uint64_t> offset;

    /** One line: "file: key 'k': offset N: message". */
    std::string toString() const;

    Error &inFile(std::string f)
    {
        if (file.empty())
            file = std::move(f);
        return *this;
    }
    Error &atKey(std::string k)
    {
        if (key.empty())
            key = std::move(k);
        return *this;
    }
    Error &atOffset(uint64_t o)
    {
        if (!offset)
            offset = o;
        return *this;
    }
};

Error makeError(Error::Code code, std::string message);

/** Either a value or an Error; the backend's boundary never throws. */
template<typename T>
class Result
{
public:
    Result(T value)
        : m_v(std::in_place_index<0>, std::move(value))
    {}
    Result(Error error)
        : m_v(std::in_place_index<1>, std::move(error))
    {}

    bool ok() const { return m_v.index() == 0; }
    explicit operator bool() const { return ok(); }
    T &value() & { return std::get<0>(m_v); }
    const T &value() const & { return std::get<0>(m_v); }
    T &&value() && { return std::get<0>(std::move(m_v)); }
    T &operator*() & { return value(); }
    const T &operator*() const & { return value(); }
    T *operator->() { return &value(); }
    const T *operator->() const { return &value(); }
    const Error &error() const { return std::get<1>(m_v); }
    Error &error() { return std::get<1>(m_v); }

private:
    std::variant<T, Error> m_v;
};

/** Result for operations that produce nothing but may fail. */
struct Ok
{
};
using Status = Result<Ok>;

} // namespace shardscope
