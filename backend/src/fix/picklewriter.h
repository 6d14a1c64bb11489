// SPDX-License-Identifier: MIT
// A pickle emitter (protocol 4, without frames) for the few shapes a DCP `.metadata` is made of:
// the opcodes Python's own pickler writes for dataclasses (NEWOBJ + BUILD), torch.Size (REDUCE),
// dtypes and enums (GLOBAL). Class references and keys are written once and memoised, as Python's
// pickler does, so that a metadata of 1.5 million chunks stays the size torch writes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

namespace shardscope::detail {

class PickleWriter
{
public:
    PickleWriter();
    /**
     * Hands the output to `sink` in pieces of about `bytes` (at flushPoint()) instead of keeping
     * it whole; finish() then returns only the last piece, after it went to the sink too.
     */
    void setSink(std::function<void(std::string &&)> sink, size_t bytes);
    /** A place where the output may be handed to the sink (between two values). */
    void flushPoint()
    {
        if (m_sink && m_out.size() >= m_pieceBytes)
            flush();
    }
    /** The finished pickle (STOP appended once), or its last piece with a sink. */
    std::string finish();

    void none();
    void boolean(bool b);
    void integer(int64_t v);
    void str(std::string_view s);
    /** A string written once and fetched from the memo after: `s` must outlive the writer.
     *  Returns its memo slot, which get() fetches without hashing it again. */
    uint32_t sharedStr(std::string_view s);
    /** A string memoised without looking it up first: for one the caller knows is new and
     *  fetches by the returned slot itself (a million keys, each unique). */
    uint32_t memoStr(std::string_view s);
    void get(uint32_t slot);
    /** `module.name`, memoised. */
    void global(std::string_view module, std::string_view name);
    /** The same, with the memo slot kept by the caller (`cache` starts at kNoSlot): no look-up
     *  for a class written a million times. */
    void global(std::string_view module, std::string_view name, uint32_t &cache);
    static constexpr uint32_t kNoSlot = UINT32_MAX;
    /** Room for `bytes` more output. */
    void reserve(size_t bytes) { m_out.reserve(m_out.size() + bytes); }

    void mark();
    void tuple(); ///< the items since the last mark
    void tuple1();
    void emptyTuple();
    void emptyDict();
    void emptyList();
    void setItems(); ///< key/value pairs since the last mark into the dict below the mark
    void appends();  ///< items since the last mark into the list below the mark
    void newObj();   ///< cls args → cls.__new__(cls, *args)
    void reduce();   ///< callable args → callable(*args)
    void build();    ///< obj state → obj with state set

    /** Items a SETITEMS or APPENDS batch holds, as Python's pickler batches them. */
    static constexpr size_t kBatch = 1000;

private:
    void op(uint8_t code) { m_out.push_back(char(code)); }
    void flush();
    void u32(uint32_t v);
    uint32_t memoize();
    std::string m_out;
    std::function<void(std::string &&)> m_sink;
    size_t m_pieceBytes = 0;
    uint32_t m_next = 0;
    std::map<std::string, uint32_t, std::less<>> m_globals;
    std::unordered_map<std::string_view, uint32_t> m_strings;
};

} // namespace shardscope::detail
