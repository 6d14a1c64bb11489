// SPDX-License-Identifier: MIT
#include "jobexit.h"

#include <csignal>
#include <iostream>

namespace shardscope::cli {

namespace {

CancelToken g_cancel;
extern "C" void onInterrupt(int)
{
    g_cancel.cancel(); // an atomic store: safe in a signal handler
}

} // namespace

const CancelToken &interruptToken()
{
    return g_cancel;
}

void catchInterrupt(bool on)
{
    std::signal(SIGINT, on ? onInterrupt : SIG_DFL);
}

RanksFinish::~RanksFinish()
{
    // Out before the barrier: once the others leave with a non-zero code, the launcher stops
    // this process too, and a report still in stdout's buffer would be cut short.
    std::cout.flush();
    if (comm)
        (void)comm->barrier();
}

} // namespace shardscope::cli
