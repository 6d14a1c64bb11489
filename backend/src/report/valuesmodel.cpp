// SPDX-License-Identifier: MIT
// The value comparison as the outputs show it: tensors grouped by verdict with repeated layers
// folded, those not compared first (a comparison that skipped some is no all-clear), then the
// worst first, and one line of figures per tensor (text for the CLI here; the report formats use
// the same groups).
#include "report/reportparts.h"

#include "shardscope/escape.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardscope {

namespace report {

namespace {

using V = TensorValueDiff::Verdict;

int rank(V v)
{
    switch (v) {
    case V::NotCompared:
        return 0;
    case V::Different:
        return 1;
    case V::Within:
        return 2;
    case V::Identical:
        break;
    }
    return 3;
}

std::string index(const std::vector<int64_t> &at)
{
    std::string s = "[";
    for (size_t i = 0; i < at.size(); ++i)
        s += (i ? ", " : "") + std::to_string(at[i]);
    return s + "]";
}

std::string num(double v)
{
    if (std::isinf(v))
        return "inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

} // namespace

std::vector<ValueGroup> valueGroups(const ValueDiffResult &r)
{
    std::vector<FoldInput> items;
    for (const TensorValueDiff &t : r.tensors)
        items.push_back({std::string(verdictName(t.verdict)) + "|" + t.why, t.name, {}});
    std::vector<ValueGroup> groups;
    for (FoldGroup &g : foldItems(items)) {
        ValueGroup v;
        v.verdict = r.tensors[g.members.front()].verdict;
        v.pattern = g.pattern;
        v.members = std::move(g.members);
        v.worst = v.members.front();
        for (size_t m : v.members) {
            const TensorValueDiff &a = r.tensors[m], &w = r.tensors[v.worst];
            if (a.relL2 > w.relL2 || (a.relL2 == w.relL2 && a.maxAbs > w.maxAbs))
                v.worst = m;
        }
        groups.push_back(std::move(v));
    }
    std::stable_sort(groups.begin(), groups.end(), [&](const ValueGroup &a, const ValueGroup &b) {
        if (rank(a.verdict) != rank(b.verdict))
            return rank(a.verdict) < rank(b.verdict);
        const TensorValueDiff &x = r.tensors[a.worst], &y = r.tensors[b.worst];
        return x.relL2 > y.relL2 || (x.relL2 == y.relL2 && x.maxAbs > y.maxAbs);
    });
    return groups;
}

std::string valueFigures(const TensorValueDiff &t)
{
    if (t.verdict == V::NotCompared || t.differing < 0) // differing < 0: by digest, no figures
        return t.why;
    if (t.verdict == V::Identical)
        return plural(size_t(t.count), "element", "elements") + " identical" +
               (t.dtypeA == t.dtypeB ? " bit for bit"
                                     : " in value (" + t.dtypeA + " and " + t.dtypeB + ")");
    std::string s = std::to_string(t.differing) + " of " + std::to_string(t.count) + " differ";
    if (!t.firstDiff.empty())
        s += " (first at " + index(t.firstDiff) + ")";
    if (t.outside)
        s += ", " + std::to_string(t.outside) + " beyond the tolerance";
    s += "; max |a-b| " + num(t.maxAbs);
    if (!t.maxAbsAt.empty())
        s += " at " + index(t.maxAbsAt);
    s += "; max rel " + num(t.maxRel) + "; mean |a-b| " + num(t.meanAbs) + "; RMS " + num(t.rms) +
         "; rel L2 " + num(t.relL2) + "; cosine " + num(t.cosine);
    if (t.maxUlp >= 0)
        s += "; at most " + std::to_string(t.maxUlp) + " ULP of " + t.ulpDtype + " apart";
    if (t.nonfinite)
        s += "; " + std::to_string(t.nonfinite) + " pairs NaN or infinite";
    if (t.dtypeA != t.dtypeB)
        s += " (" + t.dtypeA + " against " + t.dtypeB + ")";
    return s;
}

std::string valueSummary(const ValueDiffResult &r)
{
    return plural(r.tensors.size(), "tensor", "tensors") + ": " +
           std::to_string(r.count(V::NotCompared)) + " not compared, " +
           std::to_string(r.count(V::Identical)) + " identical, " +
           std::to_string(r.count(V::Within)) + " within tolerance, " +
           std::to_string(r.count(V::Different)) + " different";
}

std::string valueVerdict(const ValueDiffResult &r)
{
    const size_t unreadable = r.unreadable(), different = r.count(V::Different);
    const size_t notCompared = r.count(V::NotCompared) - unreadable;
    const int exit = r.cancelled || unreadable ? 2 : r.passes() ? 0 : 1;
    std::vector<std::string> parts;
    if (r.cancelled)
        parts.push_back("cancelled before every tensor was compared");
    if (unreadable)
        parts.push_back(std::to_string(unreadable) + " cannot be read");
    if (notCompared)
        parts.push_back(std::to_string(notCompared) + " not compared" +
                        (r.allowNotCompared ? " (allowed by --allow-not-compared)" : ""));
    if (different)
        parts.push_back(std::to_string(different) + " different");
    std::string s;
    for (const std::string &p : parts)
        s += (s.empty() ? "" : "; ") + p;
    const size_t compared = r.tensors.size() - r.count(V::NotCompared);
    if (!different && !r.cancelled && (compared || parts.empty())) {
        const std::string all = r.count(V::Within) ? "within the tolerance" : "identical";
        s += s.empty() ? "every tensor compared and " + all
                       : "; the " + std::to_string(compared) + " compared are " + all;
    }
    s += " (exit " + std::to_string(exit);
    if (exit == 1 && !different && notCompared && !r.allowNotCompared)
        s += "; --allow-not-compared accepts what cannot be compared";
    return s + ")";
}

} // namespace report

std::string renderValueDiffText(const ValueDiffResult &r)
{
    using namespace report;
    std::string out = visibleName(r.first) + " against " + visibleName(r.second) + ": values\n";
    out += "named by:   " + visibleName(r.layout) + "\n";
    out += "tolerance:  " +
           (r.rtol == 0 && r.atol == 0 ? std::string("bit-exact")
                                       : "rtol " + num(r.rtol) + ", atol " + num(r.atol)) +
           "\n";
    if (r.method == "sha256")
        out += "compared:   by each stored tensor's SHA-256, computed where each checkpoint "
               "lives (no tensor data moved): identical or not, without figures\n";
    out += "result:     " + valueSummary(r) + (r.cancelled ? " (cancelled)" : "") + "\n";
    out += "verdict:    " + valueVerdict(r) + "\n";
    std::string device = "cpu";
    for (const TensorValueDiff &t : r.tensors)
        if (!t.device.empty() && t.device != "cpu")
            device = t.device;
    if (r.method == "sha256") // no kernel compared anything: each host hashed its own bytes
        out += "read:       " + std::to_string(r.bytesRead) +
               " bytes, each hashed on the host that holds it\n";
    else
        out += "read:       " + std::to_string(r.bytesRead) + " bytes, " +
               plural(size_t(r.processes), "process", "processes") + " × " +
               plural(size_t(r.threads), "thread", "threads") + ", kernels on " + device + "\n";
    V shown = V::Identical;
    bool any = false;
    for (const ValueGroup &g : valueGroups(r)) {
        if (!any || g.verdict != shown) {
            shown = g.verdict;
            any = true;
            size_t n = 0;
            for (const TensorValueDiff &t : r.tensors)
                n += t.verdict == g.verdict;
            const char *title = g.verdict == V::Different     ? "DIFFERENT"
                                : g.verdict == V::Within      ? "WITHIN TOLERANCE"
                                : g.verdict == V::NotCompared ? "NOT COMPARED"
                                                              : "IDENTICAL";
            out += "\n" + std::string(title) + " (" + std::to_string(n) + ")" +
                   (g.verdict == V::Different || g.verdict == V::Within ? ", worst first" : "") +
                   ":\n";
        }
        const TensorValueDiff &w = r.tensors[g.worst];
        out += "  " + visibleName(g.pattern);
        if (g.members.size() > 1)
            out += "  (" + std::to_string(g.members.size()) + ")";
        out +=
            "\n      " +
            oneLine(g.members.size() > 1 && g.verdict != V::NotCompared && g.verdict != V::Identical
                        ? "worst, " + w.name + ": " + valueFigures(w)
                        : valueFigures(w)) +
            "\n";
    }
    return out;
}

} // namespace shardscope
