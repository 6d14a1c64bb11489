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

Result<std::shared_ptr<const Layout>>
detail::layoutOrRead(const std::shared_ptr<const Layout> &opened, const std::string &path)
{
    if (opened)
        return opened;
    auto read = readLayout(path);
    if (!read)
        return read.error();
    return std::shared_ptr<const Layout>(std::make_shared<const Layout>(std::move(*read)));
}

} // namespace shardscope
