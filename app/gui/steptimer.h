// SPDX-License-Identifier: MIT
#pragma once

#include <QElapsedTimer>

#include <cstdio>

namespace shardscope::gui {

/** With SHARDSCOPE_TIMING set, prints how long each step of a GUI-thread handler took
 *  (bench/README.md reads these to tell the window's share from the backend's). */
class StepTimer
{
public:
    explicit StepTimer(const char *what)
        : m_what(what)
    {
        m_timer.start();
    }
    void step(const char *name)
    {
        if (enabled())
            std::fprintf(stderr, "%s: %s %.3f s\n", m_what, name,
                         double(m_timer.nsecsElapsed()) / 1e9);
        m_timer.restart();
    }
    static bool enabled()
    {
        static const bool on = qEnvironmentVariableIsSet("SHARDSCOPE_TIMING");
        return on;
    }

private:
    const char *m_what;
    QElapsedTimer m_timer;
};

} // namespace shardscope::gui
