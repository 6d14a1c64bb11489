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

Result<OpenedIndex> detail::openOrReuse(const OpenedIndex &opened, const std::string &path,
                                        bool everyItem)
{
    if (opened) {
        // An index the open checked a sample of (a big checkpoint): the rest now, and a copy
        // with what it finds.
        const auto checked = opened->info.find("item_check");
        if (!everyItem || checked == opened->info.end() ||
            checked->second.starts_with("every item"))
            return opened;
        std::string summary;
        auto damaged = checkItems(*opened, true, &summary);
        if (damaged.empty())
            return opened;
        auto copy = std::make_shared<CheckpointIndex>(*opened);
        copy->info["item_check"] = summary;
        copy->problems.insert(copy->problems.end(), damaged.begin(), damaged.end());
        return OpenedIndex(std::move(copy));
    }
    OpenOptions options;
    options.checkEveryItem = everyItem;
    auto index = openCheckpoint(path, options);
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
