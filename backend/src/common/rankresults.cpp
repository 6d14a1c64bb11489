// SPDX-License-Identifier: MIT
#include "common/rankresults.h"

namespace shardscope::detail {

Result<std::vector<nlohmann::json>> gatherRankResults(Communicator &comm,
                                                      const nlohmann::json &mine)
{
    auto all =
        comm.allgatherText(mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (!all)
        return all.error();
    std::vector<nlohmann::json> out;
    for (size_t r = 0; r < all->size(); ++r) {
        auto j = nlohmann::json::parse((*all)[r], nullptr, false);
        if (j.is_discarded() || !j.is_object())
            return makeError(Error::Code::Internal,
                             "rank " + std::to_string(r) + " sent unreadable results");
        if (const std::string err = j.value("error", std::string()); !err.empty())
            return makeError(Error::Code::Io, "rank " + std::to_string(r) + ": " + err);
        out.push_back(std::move(j));
    }
    return out;
}

} // namespace shardscope::detail
