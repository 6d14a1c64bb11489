// SPDX-License-Identifier: MIT
// One tensor's value difference as JSON: what ranks send each other, and the entries of
// shardscope.value-diff/1 (docs/value-diff.md).
#include "compare/valuediffwire.h"

#include <cmath>

namespace shardscope {

using nlohmann::json;

namespace detail {

namespace {

json stats(const ValueSideStats &s)
{
    return {{"count", s.count}, {"finite", s.finite}, {"mean", s.mean},
            {"std", s.std},     {"min", s.min},       {"max", s.max}};
}
ValueSideStats statsFrom(const json &j)
{
    ValueSideStats s;
    s.count = j.value("count", int64_t(0));
    s.finite = j.value("finite", int64_t(0));
    s.mean = j.value("mean", 0.0);
    s.std = j.value("std", 0.0);
    s.min = j.value("min", 0.0);
    s.max = j.value("max", 0.0);
    return s;
}
double number(const json &j, const char *key, double fallback)
{
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>()
           : it != j.end() && it->is_null() ? INFINITY // JSON has no infinity
                                            : fallback;
}

} // namespace

json tensorValueDiffToJson(const TensorValueDiff &t)
{
    json j = {{"name", t.name},      {"state", t.state},
              {"shape", t.shape},    {"verdict", verdictName(t.verdict)},
              {"dtype_a", t.dtypeA}, {"dtype_b", t.dtypeB},
              {"keys_a", t.keysA},   {"keys_b", t.keysB}};
    if (t.verdict == TensorValueDiff::Verdict::NotCompared) {
        j["why"] = t.why;
        j["unreadable"] = t.unreadable;
        return j;
    }
    j.update({{"count", t.count},
              {"differing", t.differing},
              {"outside_tolerance", t.outside},
              {"nonfinite_pairs", t.nonfinite},
              {"first_diff", t.firstDiff.empty() ? json(nullptr) : json(t.firstDiff)},
              {"max_abs", t.maxAbs},
              {"max_abs_at", t.maxAbsAt.empty() ? json(nullptr) : json(t.maxAbsAt)},
              {"max_rel", t.maxRel},
              {"mean_abs", t.meanAbs},
              {"rms", t.rms},
              {"rel_l2", t.relL2},
              {"cosine", t.cosine},
              {"max_ulp", t.maxUlp < 0 ? json(nullptr) : json(t.maxUlp)},
              {"ulp_dtype", t.ulpDtype},
              {"histogram", t.histogram},
              {"a", stats(t.a)},
              {"b", stats(t.b)},
              {"device", t.device}});
    return j;
}

TensorValueDiff tensorValueDiffFromJson(const json &j)
{
    TensorValueDiff t;
    t.name = j.value("name", std::string());
    t.state = j.value("state", std::string());
    t.shape = j.value("shape", std::vector<int64_t>{});
    const std::string verdict = j.value("verdict", std::string());
    t.verdict = verdict == "identical"          ? TensorValueDiff::Verdict::Identical
                : verdict == "within_tolerance" ? TensorValueDiff::Verdict::Within
                : verdict == "different"        ? TensorValueDiff::Verdict::Different
                                                : TensorValueDiff::Verdict::NotCompared;
    t.dtypeA = j.value("dtype_a", std::string());
    t.dtypeB = j.value("dtype_b", std::string());
    t.keysA = j.value("keys_a", std::vector<std::string>{});
    t.keysB = j.value("keys_b", std::vector<std::string>{});
    t.why = j.value("why", std::string());
    t.unreadable = j.value("unreadable", false);
    if (t.verdict == TensorValueDiff::Verdict::NotCompared)
        return t;
    t.count = j.value("count", int64_t(0));
    t.differing = j.value("differing", int64_t(0));
    t.outside = j.value("outside_tolerance", int64_t(0));
    t.nonfinite = j.value("nonfinite_pairs", int64_t(0));
    if (j.contains("first_diff") && j["first_diff"].is_array())
        t.firstDiff = j["first_diff"].get<std::vector<int64_t>>();
    if (j.contains("max_abs_at") && j["max_abs_at"].is_array())
        t.maxAbsAt = j["max_abs_at"].get<std::vector<int64_t>>();
    t.maxAbs = number(j, "max_abs", 0);
    t.maxRel = number(j, "max_rel", 0);
    t.meanAbs = number(j, "mean_abs", 0);
    t.rms = number(j, "rms", 0);
    t.relL2 = number(j, "rel_l2", 0);
    t.cosine = number(j, "cosine", 1);
    t.maxUlp = j.contains("max_ulp") && j["max_ulp"].is_number() ? j["max_ulp"].get<int64_t>() : -1;
    t.ulpDtype = j.value("ulp_dtype", std::string());
    t.histogram = j.value("histogram", std::vector<int64_t>{});
    if (j.contains("a"))
        t.a = statsFrom(j["a"]);
    if (j.contains("b"))
        t.b = statsFrom(j["b"]);
    t.device = j.value("device", std::string());
    return t;
}

} // namespace detail

} // namespace shardscope
