// SPDX-License-Identifier: MIT
// One thread that runs jobs in the order they came, after the caller has moved on. The process
// waits for it when it exits (a function-local static's destructor): no job is cut off, and no
// thread is still running when the process's own exit handlers (LeakSanitizer's among them) run.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace shardscope::detail {

class BackgroundWorker
{
public:
    BackgroundWorker() = default;
    BackgroundWorker(const BackgroundWorker &) = delete;
    BackgroundWorker &operator=(const BackgroundWorker &) = delete;
    ~BackgroundWorker();

    void submit(std::function<void()> job);
    /** Returns when every job submitted so far has run. */
    void drain();

private:
    void loop();

    std::mutex m_mutex;
    std::condition_variable m_wake, m_idle;
    std::deque<std::function<void()>> m_jobs;
    bool m_busy = false, m_stop = false;
    std::thread m_thread;
};

/** Frees `value` on a background worker: destroying a large result (a diff's 120,000 entries at
 *  DeepSeek-V3 scale take half a second) need not hold up the caller. */
template<typename T>
void releaseInBackground(T value)
{
    static BackgroundWorker worker;
    worker.submit([done = std::make_shared<T>(std::move(value))]() mutable { done.reset(); });
}

} // namespace shardscope::detail
