// SPDX-License-Identifier: MIT
#include "kernels/diffdevice.h"

namespace shardscope::kernels {

bool deviceValueDiff(const unsigned char *, int, int, const unsigned char *, int, int, int64_t,
                     int64_t, const DiffParams &, DiffAccum &, unsigned long long *, Accum &,
                     Accum &, const char *&error)
{
    error = "this build has no CUDA kernels";
    return false;
}

bool deviceValueDiffSpeed(int64_t, int, int, int, double &, double &, const char *&error)
{
    error = "this build has no CUDA kernels";
    return false;
}

} // namespace shardscope::kernels
