// SPDX-License-Identifier: MIT
// shardscope.value-diff/1 (docs/value-diff.md).
#include "compare/valuediffwire.h"

#include <algorithm>
#include <cmath>

namespace shardscope {

using nlohmann::json;

std::string_view verdictName(TensorValueDiff::Verdict v)
{
    switch (v) {
    case TensorValueDiff::Verdict::Identical:
        return "identical";
    case TensorValueDiff::Verdict::Within:
        return "within_tolerance";
    case TensorValueDiff::Verdict::Different:
        return "different";
    case TensorValueDiff::Verdict::NotCompared:
        break;
    }
    return "not_compared";
}

size_t ValueDiffResult::count(TensorValueDiff::Verdict v) const
{
    return size_t(std::count_if(tensors.begin(), tensors.end(),
                                [v](const TensorValueDiff &t) { return t.verdict == v; }));
}

size_t ValueDiffResult::unreadable() const
{
    return size_t(std::count_if(tensors.begin(), tensors.end(),
                                [](const TensorValueDiff &t) { return t.unreadable; }));
}

bool ValueDiffResult::withinTolerance() const
{
    return !cancelled && count(TensorValueDiff::Verdict::Different) == 0;
}

bool ValueDiffResult::passes() const
{
    return withinTolerance() && unreadable() == 0 &&
           (allowNotCompared || count(TensorValueDiff::Verdict::NotCompared) == 0);
}

std::string valueDiffToJson(const ValueDiffResult &r)
{
    json tensors = json::array();
    for (const TensorValueDiff &t : r.tensors)
        tensors.push_back(detail::tensorValueDiffToJson(t));
    using V = TensorValueDiff::Verdict;
    json j{{"schema", "shardscope.value-diff/1"},
           {"first", r.first},
           {"second", r.second},
           {"layout", r.layout},
           {"rtol", r.rtol},
           {"atol", r.atol},
           {"allow_not_compared", r.allowNotCompared},
           {"summary",
            {{"tensors", r.tensors.size()},
             {"not_compared", r.count(V::NotCompared)},
             {"identical", r.count(V::Identical)},
             {"within_tolerance", r.count(V::Within)},
             {"different", r.count(V::Different)},
             {"unreadable", r.unreadable()},
             {"within", r.withinTolerance()},
             {"passes", r.passes()}}},
           {"processes", r.processes},
           {"threads", r.threads},
           {"bytes_read", r.bytesRead},
           {"max_memory", r.maxMemory},
           {"cancelled", r.cancelled},
           {"tensors", std::move(tensors)}};
    if (!r.method.empty()) // two places: by digest (valuesByHash())
        j["method"] = r.method;
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace shardscope
