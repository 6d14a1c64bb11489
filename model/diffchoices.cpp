// SPDX-License-Identifier: MIT
#include "diffchoices.h"

#include "formatting.h"

#include <QCoreApplication>

#include <algorithm>

namespace shardscope::model {

namespace {

QString text(std::string_view s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

} // namespace

QList<RuleChoice> diffRules()
{
    QList<RuleChoice> out;
    for (const RuleInfo &r : allRules())
        out.push_back({QString::fromStdString(r.name), QString::fromStdString(r.description)});
    return out;
}

QStringList strictnessNames()
{
    QStringList out;
    for (int s = 0; s <= int(Strictness::IgnoreAll); ++s)
        out.push_back(text(strictnessName(Strictness(s))));
    return out;
}

QString loadActionName(LoadOutcome::Action action)
{
    return text(actionName(action));
}

size_t loadProblemCount(const DiffResult &diff)
{
    return size_t(std::count_if(diff.entries.begin(), diff.entries.end(), isLoadProblem));
}

QString loadSummary(const DiffResult &diff)
{
    const size_t kept = diff.outcome.keptAtInit.size();
    QString s = QCoreApplication::translate("shardscope", "Load: %1, %2 of %3 parameters filled")
                    .arg(loadActionName(diff.outcome.action), formatCount(diff.loadableModel),
                         formatCount(diff.expectedModel));
    if (kept)
        s += QCoreApplication::translate("shardscope", ", %1 silently kept at init")
                 .arg(formatCount(kept));
    // The problems count optimizer states too: said apart, "10 kept, 40 problems" reads as a
    // contradiction when 30 of the 40 are those ten parameters' states.
    size_t bySection[3] = {0, 0, 0};
    for (const DiffEntry &e : diff.entries)
        if (isLoadProblem(e))
            ++bySection[std::min<size_t>(size_t(e.section), 2)];
    const size_t problems = bySection[0] + bySection[1] + bySection[2];
    if (problems == 0)
        return s;
    s += QStringLiteral(", ") + countOf(problems, "problem", "problems");
    // Short: the status bar has it whole at 1280 px beside the message and the reading's.
    if (bySection[1])
        s += QCoreApplication::translate("shardscope", " (%1 optimizer)")
                 .arg(formatCount(bySection[1]));
    return s;
}

} // namespace shardscope::model
