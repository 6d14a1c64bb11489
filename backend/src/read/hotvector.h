// SPDX-License-Identifier: MIT
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace shardscope::detail {

/**
 * A growable array of trivially copyable values whose only out-of-line path is growth, so that
 * the VM's pushes inline (std::vector's did not, in the hot loop).
 */
template<typename T>
class HotVector
{
    static_assert(std::is_trivially_copyable_v<T>);

public:
    HotVector() = default;
    HotVector(const HotVector &) = delete;
    HotVector &operator=(const HotVector &) = delete;
    HotVector(HotVector &&o) noexcept { swap(o); }
    HotVector &operator=(HotVector &&o) noexcept
    {
        swap(o);
        return *this;
    }
    ~HotVector() { std::free(m_data); }
    [[gnu::always_inline]] void push_back(const T &v)
    {
        if (m_size == m_cap) [[unlikely]]
            grow(m_size + 1);
        m_data[m_size++] = v;
    }
    void append(const T *first, const T *last)
    {
        const size_t n = size_t(last - first);
        if (n == 0) // `first` may be null
            return;
        if (m_size + n > m_cap)
            grow(m_size + n);
        std::memcpy(static_cast<void *>(m_data + m_size), first, n * sizeof(T));
        m_size += n;
    }
    void reserve(size_t n)
    {
        if (n > m_cap)
            grow(n);
    }
    void resize(size_t n, const T &fill = T())
    {
        reserve(n);
        for (size_t i = m_size; i < n; ++i)
            m_data[i] = fill;
        m_size = n;
    }
    /** resize() for bytes, zeroed by memset. */
    void resizeZeroed(size_t n)
    {
        reserve(n);
        if (n > m_size)
            std::memset(static_cast<void *>(m_data + m_size), 0, (n - m_size) * sizeof(T));
        m_size = n;
    }
    /**
     * Its block, emptied, as a vector of another trivially copyable type: memory already
     * faulted in, to be filled again without the kernel mapping fresh pages (see readDcp).
     */
    template<typename U>
    HotVector<U> reuseAs() &&
    {
        HotVector<U> out;
        out.adopt(m_data, m_cap * sizeof(T) / sizeof(U));
        m_data = nullptr;
        m_size = m_cap = 0;
        return out;
    }
    void pop_back() { --m_size; }
    T &back() { return m_data[m_size - 1]; }
    const T &back() const { return m_data[m_size - 1]; }
    T &operator[](size_t i) { return m_data[i]; }
    const T &operator[](size_t i) const { return m_data[i]; }
    size_t size() const { return m_size; }
    size_t capacity() const { return m_cap; }
    bool empty() const { return m_size == 0; }
    T *data() { return m_data; }
    const T *data() const { return m_data; }
    T *begin() { return m_data; }
    T *end() { return m_data + m_size; }
    const T *begin() const { return m_data; }
    const T *end() const { return m_data + m_size; }

private:
    template<typename>
    friend class HotVector;
    void adopt(void *data, size_t cap)
    {
        std::free(m_data);
        m_data = static_cast<T *>(data);
        m_size = 0;
        m_cap = cap;
    }
    void swap(HotVector &o) noexcept
    {
        std::swap(m_data, o.m_data);
        std::swap(m_size, o.m_size);
        std::swap(m_cap, o.m_cap);
    }
    [[gnu::noinline]] void grow(size_t need)
    {
        const size_t cap = std::max<size_t>({need, m_cap * 2, 64});
        T *p = static_cast<T *>(std::realloc(static_cast<void *>(m_data), cap * sizeof(T)));
        if (!p)
            throw std::bad_alloc();
        m_data = p;
        m_cap = cap;
    }
    T *m_data = nullptr;
    size_t m_size = 0, m_cap = 0;
};

} // namespace shardscope::detail
