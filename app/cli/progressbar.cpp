// SPDX-License-Identifier: MIT
#include "progressbar.h"

#include <cstdio>

namespace shardscope::cli {

ProgressBar::ProgressBar(bool enabled)
    : m_enabled(enabled)
    , m_start(std::chrono::steady_clock::now())
{}

ProgressBar::~ProgressBar()
{
    if (m_drawn)
        std::fputs("\n", stderr);
}

void ProgressBar::update(uint64_t done, uint64_t total)
{
    if (!m_enabled || total == 0)
        return;
    const auto now = std::chrono::steady_clock::now();
    if (now - m_last < std::chrono::milliseconds(200) && done < total)
        return;
    m_last = now;
    const double f = double(done) / double(total);
    const double elapsed = std::chrono::duration<double>(now - m_start).count();
    const double eta = f > 0 ? elapsed * (1 - f) / f : 0;
    const int width = 30, fill = int(f * width);
    std::fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %.0f MiB  ETA %.0fs ", fill,
                 "##############################", width - fill, "", f * 100,
                 double(done) / (1 << 20), eta);
    m_drawn = true;
}

} // namespace shardscope::cli
