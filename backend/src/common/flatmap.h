// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>
#include <xxhash.h>

namespace shardscope::detail {

/**
 * string → uint32_t, open addressing with linear probing, keyed by hash: inserting allocates
 * nothing per key and the caller need not keep the keys alive.
 * DCP metadata needs millions of key lookups; std::unordered_map<std::string> spent most of the
 * parse time in allocation and pointer chasing.
 */
class FlatStringMap
{
public:
    static constexpr uint32_t kAbsent = UINT32_MAX;

    explicit FlatStringMap(size_t expected = 1024) { rehash(capacityFor(expected)); }

    uint32_t find(std::string_view key) const { return find(key.size(), hash(key)); }
    uint32_t find(size_t length, const XXH128_hash_t &h) const
    {
        for (size_t i = h.low64 & m_mask;; i = (i + 1) & m_mask) {
            const Slot &s = m_slots[i];
            if (s.value == kAbsent)
                return kAbsent;
            if (s.same(h, length))
                return s.value;
        }
    }

    /** Starts loading the slot where a probe for `h` begins: batches of lookups overlap their
     *  cache misses instead of waiting for each (the table is tens of megabytes). */
    void prefetch(const XXH128_hash_t &h) const { __builtin_prefetch(&m_slots[h.low64 & m_mask]); }

    /** Inserts unless present; returns the value now stored for the key. */
    uint32_t insert(std::string_view key, uint32_t value)
    {
        return insert(key.size(), hash(key), value);
    }
    uint32_t insert(size_t length, const XXH128_hash_t &h, uint32_t value)
    {
        if ((m_size + 1) * 4 > m_slots.size() * 3)
            rehash(m_slots.size() * 2);
        for (size_t i = h.low64 & m_mask;; i = (i + 1) & m_mask) {
            Slot &s = m_slots[i];
            if (s.value == kAbsent) {
                s = {h.low64, h.high64, uint32_t(length), value};
                ++m_size;
                return value;
            }
            if (s.same(h, length))
                return s.value;
        }
    }

    size_t size() const { return m_size; }

private:
    // Keys are identified by their 128-bit XXH3 hash and length: a false match needs a 2^-128
    // collision, and comparing hashes avoids touching the keys' bytes scattered over a
    // half-gigabyte file.
    struct Slot
    {
        uint64_t lo = 0, hi = 0;
        uint32_t length = 0;
        uint32_t value = kAbsent;
        bool same(const XXH128_hash_t &h, size_t len) const
        {
            return lo == h.low64 && hi == h.high64 && length == len;
        }
    };

public:
    static XXH128_hash_t hash(std::string_view k) { return XXH3_128bits(k.data(), k.size()); }

private:
    static size_t capacityFor(size_t n)
    {
        size_t c = 16;
        while (c * 3 < n * 4)
            c *= 2;
        return c;
    }
    void rehash(size_t capacity)
    {
        std::vector<Slot> old = std::move(m_slots);
        m_slots.assign(capacity, Slot{});
        m_mask = capacity - 1;
        m_size = 0;
        for (const Slot &s : old)
            if (s.value != kAbsent)
                for (size_t i = s.lo & m_mask;; i = (i + 1) & m_mask)
                    if (m_slots[i].value == kAbsent) {
                        m_slots[i] = s;
                        ++m_size;
                        break;
                    }
    }

    std::vector<Slot> m_slots;
    size_t m_mask = 0;
    size_t m_size = 0;
};

} // namespace shardscope::detail
