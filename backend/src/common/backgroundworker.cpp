// SPDX-License-Identifier: MIT
#include "common/backgroundworker.h"

namespace shardscope::detail {

BackgroundWorker::~BackgroundWorker()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
        m_wake.notify_all();
    }
    if (m_thread.joinable())
        m_thread.join();
}

void BackgroundWorker::submit(std::function<void()> job)
{
    std::lock_guard lock(m_mutex);
    if (!m_thread.joinable())
        m_thread = std::thread([this] { loop(); });
    m_jobs.push_back(std::move(job));
    m_wake.notify_all();
}

void BackgroundWorker::drain()
{
    std::unique_lock lock(m_mutex);
    m_idle.wait(lock, [this] { return m_jobs.empty() && !m_busy; });
}

void BackgroundWorker::loop()
{
    std::unique_lock lock(m_mutex);
    for (;;) {
        m_wake.wait(lock, [this] { return m_stop || !m_jobs.empty(); });
        if (m_jobs.empty())
            return; // stopping, and nothing left to run
        std::function<void()> job = std::move(m_jobs.front());
        m_jobs.pop_front();
        m_busy = true;
        lock.unlock();
        job();
        job = nullptr; // what it captured goes before the worker says it is idle
        lock.lock();
        m_busy = false;
        m_idle.notify_all();
    }
}

} // namespace shardscope::detail
