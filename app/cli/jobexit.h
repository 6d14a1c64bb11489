// SPDX-License-Identifier: MIT
// What verify and diff --values share as jobs that may run as ranks of torchrun or srun.
#pragma once

#include <shardscope/session.h>

namespace shardscope::cli {

/** Ctrl-C cancels the running job through this token (between catchInterrupt(true/false)). */
const CancelToken &interruptToken();
void catchInterrupt(bool on);

/**
 * Keeps the other ranks of a job until the leader has printed: a launcher stops the whole job
 * when one rank exits with a non-zero code, which would cut the leader's report short.
 */
struct RanksFinish
{
    Communicator *comm = nullptr;
    ~RanksFinish();
};

} // namespace shardscope::cli
