// SPDX-License-Identifier: MIT
#include "shardscope/session.h"

#include "session/opened.h"

namespace shardscope {

bool JobControl::report(const JobProgress &p) const
{
    if (cancel.cancelled())
        return false;
    return !progress || progress(p);
}

Result<OpenedIndex> detail::openOrReuse(const OpenedIndex &opened, const std::string &path)
{
    if (opened)
        return opened;
    auto index = openCheckpoint(path);
    if (!index)
        return index.error();
    return OpenedIndex(std::make_shared<const CheckpointIndex>(std::move(index).value()));
}

} // namespace shardscope
