// SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstdint>

namespace shardscope::cli {

/** A progress bar with an ETA on stderr, redrawn at most five times a second. */
class ProgressBar
{
public:
    explicit ProgressBar(bool enabled);
    ~ProgressBar();
    void update(uint64_t done, uint64_t total);

private:
    bool m_enabled;
    bool m_drawn = false;
    std::chrono::steady_clock::time_point m_start, m_last;
};

} // namespace shardscope::cli
