// SPDX-License-Identifier: MIT
#include "read/prefaulter.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace shardscope::detail {

namespace {
// How far ahead of each buffer's used end to keep pages mapped. Large enough that the owner
// never catches up between two publishes, small enough to bound what an early stop wastes.
constexpr size_t kLookahead = size_t(8) << 20;
constexpr size_t kStep = size_t(1) << 20;
} // namespace

Prefaulter::Prefaulter()
    : m_thread([this] { loop(); })
{}

Prefaulter::~Prefaulter()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_one();
    m_thread.join();
}

void Prefaulter::publish(Range a, Range b, Range c, Range d)
{
    {
        std::lock_guard lock(m_mutex);
        m_ranges = {a, b, c, d};
        m_fresh = true;
    }
    m_wake.notify_one();
}

void Prefaulter::loop()
{
    const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
    std::array<uintptr_t, kBuffers> done{}; // populated up to this address, per buffer
    std::array<const void *, kBuffers> base{};
    for (;;) {
        std::array<Range, kBuffers> ranges;
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] { return m_fresh || m_stop; });
            if (m_stop || m_disabled)
                return;
            ranges = m_ranges;
            m_fresh = false;
        }
        // Round-robin in small steps so that every buffer stays ahead, not just the first.
        bool more = true;
        while (more) {
            more = false;
            for (size_t i = 0; i < kBuffers; ++i) {
                const Range &r = ranges[i];
                if (!r.data || !r.capacity)
                    continue;
                const auto start = uintptr_t(r.data);
                if (r.data != base[i]) {
                    base[i] = r.data;
                    done[i] = start;
                }
                const uintptr_t end = start + r.capacity;
                const uintptr_t want = std::min(end, start + r.used + kLookahead);
                uintptr_t from = std::max(done[i], start + r.used) & ~(page - 1);
                uintptr_t to = std::min(want, from + kStep) & ~(page - 1);
                if (to <= from)
                    continue;
                if (::madvise(reinterpret_cast<void *>(from), to - from, MADV_POPULATE_WRITE) !=
                        0 &&
                    (errno == EINVAL)) {
                    m_disabled = true; // old kernel: nothing to gain, stop trying
                    return;
                }
                done[i] = to;
                more = more || to < want;
            }
        }
    }
}

} // namespace shardscope::detail
