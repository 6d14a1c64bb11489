// SPDX-License-Identifier: MIT
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardscope {

/*
 * The containers of a TensorEntry. A big checkpoint has 650,000 entries; read from the
 * persistent index they view its mapped file instead of holding 2.6 million allocations of their
 * own, which a fresh process would spend longer faulting in than the whole open takes
 * (bench/README.md, the persistent index). A view is only ever made of bytes that stay mapped
 * for the life of the process, so a copy may view them too; anything that changes the elements
 * makes them its own first. Reading never changes anything: element access is const, so readers
 * on many threads never race. 16 bytes, at most 2^32 - 1 elements.
 */
namespace compact_detail {
[[noreturn]] inline void tooLong()
{
    throw std::length_error("more than 2^32 - 1 elements in a compact container");
}
inline uint32_t checkedSize(size_t n)
{
    if (n > UINT32_MAX)
        tooLong();
    return uint32_t(n);
}
} // namespace compact_detail

/** A vector of trivially copyable elements, owned or viewed (see above). */
template<typename T>
class CompactVector
{
    static_assert(std::is_trivially_copyable_v<T>);

public:
    using value_type = T;
    using size_type = size_t;
    using difference_type = std::ptrdiff_t;
    using const_iterator = const T *;
    using iterator = const T *;
    using const_reference = const T &;
    using reference = const T &;

    CompactVector() noexcept = default;
    CompactVector(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
    CompactVector(const std::vector<T> &items) { assign(items.begin(), items.end()); }
    explicit CompactVector(std::span<const T> items) { assign(items.begin(), items.end()); }
    template<std::input_iterator It>
    CompactVector(It first, It last)
    {
        assign(first, last);
    }
    explicit CompactVector(size_t n, const T &value = T{}) { resize(n, value); }
    /** Views `n` elements at `data`, which must stay valid for the life of the process. */
    static CompactVector view(const T *data, size_t n)
    {
        CompactVector v;
        v.m_data = const_cast<T *>(data);
        v.m_size = compact_detail::checkedSize(n);
        return v;
    }

    CompactVector(const CompactVector &o)
    {
        if (o.owns())
            assign(o.begin(), o.end());
        else
            m_data = o.m_data, m_size = o.m_size;
    }
    CompactVector(CompactVector &&o) noexcept
        : m_data(std::exchange(o.m_data, nullptr))
        , m_size(std::exchange(o.m_size, 0))
        , m_capacity(std::exchange(o.m_capacity, 0))
    {}
    CompactVector &operator=(const CompactVector &o)
    {
        if (this != &o) {
            CompactVector copy(o);
            swap(copy);
        }
        return *this;
    }
    CompactVector &operator=(CompactVector &&o) noexcept
    {
        CompactVector moved(std::move(o));
        swap(moved);
        return *this;
    }
    CompactVector &operator=(std::initializer_list<T> items)
    {
        assign(items.begin(), items.end());
        return *this;
    }
    CompactVector &operator=(const std::vector<T> &items)
    {
        assign(items.begin(), items.end());
        return *this;
    }
    ~CompactVector() { release(); }
    void swap(CompactVector &o) noexcept
    {
        std::swap(m_data, o.m_data);
        std::swap(m_size, o.m_size);
        std::swap(m_capacity, o.m_capacity);
    }

    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    const T *data() const { return m_data; }
    const T *begin() const { return m_data; }
    const T *end() const { return m_data + m_size; }
    const T *cbegin() const { return begin(); }
    const T *cend() const { return end(); }
    const T &operator[](size_t i) const { return m_data[i]; }
    const T &front() const { return m_data[0]; }
    const T &back() const { return m_data[m_size - 1]; }
    /** False when it views the persistent index's bytes. */
    bool owns() const { return m_capacity != 0 || m_size == 0; }
    std::vector<T> toVector() const { return std::vector<T>(begin(), end()); }
    /** A copy. Explicit: a function that keeps views into its vector argument must not be
     *  handed a temporary. */
    explicit operator std::vector<T>() const { return toVector(); }

    // Changes: each makes the elements its own first.
    /** The elements, to change in place. */
    std::span<T> edit()
    {
        own(m_size);
        return {m_data, m_size};
    }
    void reserve(size_t n) { own(n); }
    void clear()
    {
        if (!owns())
            *this = CompactVector();
        m_size = 0;
    }
    void push_back(const T &v)
    {
        const T copy = v; // `v` may be one of ours
        grow(size_t(m_size) + 1);
        m_data[m_size++] = copy;
    }
    template<typename... Args>
    T &emplace_back(Args &&...args)
    {
        const T made{std::forward<Args>(args)...};
        grow(size_t(m_size) + 1);
        m_data[m_size] = made;
        return m_data[m_size++];
    }
    void pop_back()
    {
        own(m_size);
        --m_size;
    }
    void resize(size_t n, const T &value = T{})
    {
        const T copy = value;
        grow(n);
        for (size_t i = m_size; i < n; ++i)
            m_data[i] = copy;
        m_size = uint32_t(n);
    }
    template<std::input_iterator It>
    void assign(It first, It last)
    {
        CompactVector v;
        if constexpr (std::forward_iterator<It>)
            v.own(size_t(std::distance(first, last)));
        for (; first != last; ++first)
            v.push_back(*first);
        swap(v);
    }
    void assign(size_t n, const T &value)
    {
        CompactVector v(n, value);
        swap(v);
    }
    /** Inserts [first, last) before `pos` (which may be our own); returns where it went. */
    template<std::input_iterator It>
    const T *insert(const T *pos, It first, It last)
    {
        const size_t at = size_t(pos - begin());
        const std::vector<T> items(first, last);
        CompactVector v;
        v.own(size_t(m_size) + items.size());
        v.append(std::span<const T>(begin(), at));
        v.append(items);
        v.append(std::span<const T>(begin() + at, end()));
        swap(v);
        return begin() + at;
    }
    void append(std::span<const T> items)
    {
        if (items.empty())
            return;
        // `items` may be ours: copied before the buffer moves.
        const std::vector<T> copy(items.begin(), items.end());
        grow(size_t(m_size) + copy.size());
        std::memcpy(static_cast<void *>(m_data + m_size), copy.data(), copy.size() * sizeof(T));
        m_size += uint32_t(copy.size());
    }

    friend bool operator==(const CompactVector &a, const CompactVector &b)
    {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }
    friend bool operator==(const CompactVector &a, const std::vector<T> &b)
    {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    void release()
    {
        if (m_capacity)
            std::allocator<T>().deallocate(m_data, m_capacity);
    }
    /** Owned, with room for `n`. */
    void own(size_t n)
    {
        if (owns() && n <= m_capacity)
            return;
        const size_t cap = std::max<size_t>(n, owns() ? size_t(m_capacity) : size_t(m_size));
        compact_detail::checkedSize(cap); // before anything changes
        T *p = std::allocator<T>().allocate(cap);
        if (m_size)
            std::memcpy(static_cast<void *>(p), m_data, size_t(m_size) * sizeof(T));
        release();
        m_data = p;
        m_capacity = compact_detail::checkedSize(cap);
    }
    void grow(size_t n)
    {
        compact_detail::checkedSize(n);
        if (owns() && n <= m_capacity)
            return;
        own(std::min<size_t>(UINT32_MAX, std::max<size_t>(n, 2 * size_t(m_capacity))));
    }

    T *m_data = nullptr;
    uint32_t m_size = 0;
    uint32_t m_capacity = 0; // 0 with elements: a view
};

/** A string, owned or viewed like CompactVector; always NUL-terminated (c_str()). */
class CompactString
{
public:
    static constexpr size_t npos = std::string_view::npos;

    CompactString() noexcept = default;
    CompactString(std::string_view s) { assign(s); }
    CompactString(const std::string &s) { assign(s); }
    CompactString(const char *s) { assign(std::string_view(s)); }
    /** Views `n` bytes at `data`, with a NUL after them, valid for the life of the process. */
    static CompactString view(const char *data, size_t n)
    {
        CompactString s;
        s.m_data = const_cast<char *>(data);
        s.m_size = compact_detail::checkedSize(n);
        return s;
    }

    CompactString(const CompactString &o)
    {
        if (o.owns())
            assign(o.view());
        else
            m_data = o.m_data, m_size = o.m_size;
    }
    CompactString(CompactString &&o) noexcept
        : m_data(std::exchange(o.m_data, nullptr))
        , m_size(std::exchange(o.m_size, 0))
        , m_capacity(std::exchange(o.m_capacity, 0))
    {}
    CompactString &operator=(const CompactString &o)
    {
        if (this != &o) {
            CompactString copy(o);
            swap(copy);
        }
        return *this;
    }
    CompactString &operator=(CompactString &&o) noexcept
    {
        CompactString moved(std::move(o));
        swap(moved);
        return *this;
    }
    CompactString &operator=(std::string_view s)
    {
        assign(s);
        return *this;
    }
    CompactString &operator=(const std::string &s)
    {
        assign(s);
        return *this;
    }
    CompactString &operator=(const char *s)
    {
        assign(std::string_view(s));
        return *this;
    }
    ~CompactString()
    {
        if (m_capacity)
            delete[] m_data;
    }
    void swap(CompactString &o) noexcept
    {
        std::swap(m_data, o.m_data);
        std::swap(m_size, o.m_size);
        std::swap(m_capacity, o.m_capacity);
    }

    size_t size() const { return m_size; }
    size_t length() const { return m_size; }
    bool empty() const { return m_size == 0; }
    const char *data() const { return m_size ? m_data : ""; }
    const char *c_str() const { return data(); }
    const char *begin() const { return data(); }
    const char *end() const { return data() + m_size; }
    char operator[](size_t i) const { return data()[i]; } // [size()] is the NUL, as std::string's
    char front() const { return data()[0]; }
    char back() const { return data()[m_size - 1]; }
    bool owns() const { return m_capacity != 0 || m_size == 0; }

    std::string_view view() const { return {data(), m_size}; }
    operator std::string_view() const { return view(); }
    std::string str() const { return std::string(view()); }
    /** Explicit for the same reason as CompactVector's: views into a temporary dangle. */
    explicit operator std::string() const { return str(); }

    bool starts_with(std::string_view s) const { return view().starts_with(s); }
    bool starts_with(char c) const { return view().starts_with(c); }
    bool ends_with(std::string_view s) const { return view().ends_with(s); }
    bool ends_with(char c) const { return view().ends_with(c); }
    bool contains(std::string_view s) const { return view().find(s) != npos; }
    size_t find(std::string_view s, size_t pos = 0) const { return view().find(s, pos); }
    size_t find(char c, size_t pos = 0) const { return view().find(c, pos); }
    size_t rfind(std::string_view s, size_t pos = npos) const { return view().rfind(s, pos); }
    size_t rfind(char c, size_t pos = npos) const { return view().rfind(c, pos); }
    /** A view into this string (std::string's returns a copy). */
    std::string_view substr(size_t pos, size_t n = npos) const { return view().substr(pos, n); }
    int compare(std::string_view s) const { return view().compare(s); }

    void assign(std::string_view s)
    {
        CompactString t;
        t.reserve(s.size());
        if (!s.empty())
            std::memcpy(t.m_data, s.data(), s.size());
        t.m_size = compact_detail::checkedSize(s.size());
        t.m_data[t.m_size] = '\0';
        swap(t);
    }
    void reserve(size_t n)
    {
        n = std::max<size_t>(n, m_size); // a view asked for less still copies all of it
        if (n >= UINT32_MAX)
            compact_detail::tooLong(); // before anything changes: n + 1 bytes are allocated
        if (m_capacity && n <= m_capacity - 1)
            return;
        char *p = new char[n + 1];
        if (m_size)
            std::memcpy(p, m_data, m_size);
        p[m_size] = '\0';
        if (m_capacity)
            delete[] m_data;
        m_data = p;
        m_capacity = compact_detail::checkedSize(n + 1);
    }
    CompactString &append(std::string_view s)
    {
        std::string joined(view());
        joined.append(s);
        assign(joined);
        return *this;
    }
    CompactString &operator+=(std::string_view s) { return append(s); }
    void clear() { *this = CompactString(); }

    friend bool operator==(const CompactString &a, const CompactString &b)
    {
        return a.view() == b.view();
    }
    friend bool operator==(const CompactString &a, std::string_view b) { return a.view() == b; }
    friend bool operator==(const CompactString &a, const char *b) { return a.view() == b; }
    friend bool operator==(const CompactString &a, const std::string &b) { return a.view() == b; }
    friend std::strong_ordering operator<=>(const CompactString &a, const CompactString &b)
    {
        return a.view() <=> b.view();
    }
    friend std::strong_ordering operator<=>(const CompactString &a, std::string_view b)
    {
        return a.view() <=> b;
    }
    friend std::strong_ordering operator<=>(const CompactString &a, const char *b)
    {
        return a.view() <=> std::string_view(b);
    }
    friend std::strong_ordering operator<=>(const CompactString &a, const std::string &b)
    {
        return a.view() <=> std::string_view(b);
    }
    friend std::string operator+(const CompactString &a, std::string_view b)
    {
        std::string s(a.view());
        s.append(b);
        return s;
    }
    friend std::string operator+(std::string_view a, const CompactString &b)
    {
        std::string s(a);
        s.append(b.view());
        return s;
    }
    friend std::string operator+(const CompactString &a, const std::string &b)
    {
        return a + std::string_view(b);
    }
    friend std::string operator+(const std::string &a, const CompactString &b)
    {
        return std::string_view(a) + b;
    }
    friend std::string operator+(const CompactString &a, const char *b)
    {
        return a + std::string_view(b);
    }
    friend std::string operator+(const char *a, const CompactString &b)
    {
        return std::string_view(a) + b;
    }
    friend std::string operator+(std::string &&a, const CompactString &b)
    {
        a.append(b.view());
        return std::move(a);
    }
    friend std::ostream &operator<<(std::ostream &os, const CompactString &s)
    {
        return os << s.view();
    }

private:
    char *m_data = nullptr;
    uint32_t m_size = 0;
    uint32_t m_capacity = 0; // bytes allocated, the NUL's included; 0 with a size: a view
};

} // namespace shardscope

template<>
struct std::hash<shardscope::CompactString>
{
    size_t operator()(const shardscope::CompactString &s) const noexcept
    {
        return std::hash<std::string_view>()(s.view());
    }
};
