// SPDX-License-Identifier: MIT
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

namespace shardscope::detail {

/**
 * Populates the pages just past the used part of a few growing buffers, on another thread, so
 * that the thread filling them does not take a page fault every 4 KiB. On this kind of VM a
 * fault costs microseconds and the pickle arenas of a 500 MiB metadata file take 130,000 of
 * them. The helper never reads or writes the buffers: it only asks the kernel to map their pages
 * (MADV_POPULATE_WRITE), so it cannot race with the owner; a stale range (the buffer moved) makes
 * madvise fail or populate a page somebody else will use, both harmless.
 */
class Prefaulter
{
public:
    struct Range
    {
        const void *data = nullptr;
        size_t used = 0;     // bytes
        size_t capacity = 0; // bytes
    };
    static constexpr size_t kBuffers = 4;

    Prefaulter();
    ~Prefaulter();
    Prefaulter(const Prefaulter &) = delete;
    Prefaulter &operator=(const Prefaulter &) = delete;

    /// Called by the owner now and then; cheap (a lock and a notify).
    void publish(Range a, Range b, Range c, Range d);

private:
    void loop();

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::array<Range, kBuffers> m_ranges{};
    bool m_fresh = false;
    bool m_stop = false;
    bool m_disabled = false; // the kernel lacks MADV_POPULATE_WRITE
    std::thread m_thread;
};

} // namespace shardscope::detail
