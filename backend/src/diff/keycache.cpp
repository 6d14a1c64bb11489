// SPDX-License-Identifier: MIT
#include "diff/keycache.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace shardscope::detail {

namespace {

struct Cached
{
    std::weak_ptr<const CheckpointIndex> index;
    bool stripWrappers = false, literalNames = false;
    std::shared_ptr<const SortedKeys> keys;
};

// A window diffs one index at a time, two when it compares: a few entries are enough, and the
// oldest goes first. An entry whose index is gone is dropped at the next call (its views would
// dangle; they are never read once the weak pointer has expired).
constexpr size_t kEntries = 4;
std::mutex s_mutex;
std::vector<Cached> s_cache;

} // namespace

std::shared_ptr<const SortedKeys> sortedKeys(const std::shared_ptr<const CheckpointIndex> &index,
                                             bool stripWrappers, bool literalNames,
                                             const std::function<void(SortedKeys &)> &make)
{
    if (!index) {
        auto made = std::make_shared<SortedKeys>();
        make(*made);
        return made;
    }
    {
        std::lock_guard lock(s_mutex);
        std::erase_if(s_cache, [](const Cached &c) { return c.index.expired(); });
        for (const Cached &c : s_cache)
            // By owner, not lock(): no strong reference made under the lock.
            if (!c.index.owner_before(index) && !index.owner_before(c.index) &&
                c.stripWrappers == stripWrappers && c.literalNames == literalNames)
                return c.keys;
    }
    // Made outside the lock: two diffs of different indexes need not wait for each other.
    auto made = std::make_shared<SortedKeys>();
    make(*made);
    std::lock_guard lock(s_mutex);
    if (s_cache.size() >= kEntries)
        s_cache.erase(s_cache.begin());
    s_cache.push_back({index, stripWrappers, literalNames, made});
    return made;
}

} // namespace shardscope::detail
