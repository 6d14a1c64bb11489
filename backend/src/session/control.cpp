// SPDX-License-Identifier: MIT
#include "shardscope/session.h"

namespace shardscope {

bool JobControl::report(const JobProgress &p) const
{
    if (cancel.cancelled())
        return false;
    return !progress || progress(p);
}

} // namespace shardscope
