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

bool isLoadProblem(const DiffEntry &e)
{
    // report/model.cpp's isProblem(): splits and renames the real load performs are the rules
    // working, everything else it does not fill as stored is a problem.
    return !e.realLoadFills || (e.status != LoadStatus::Ok && e.status != LoadStatus::Split &&
                                e.status != LoadStatus::Rename);
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
        s += QCoreApplication::translate("shardscope", ", %1 silently kept at initial values")
                 .arg(formatCount(kept));
    if (const size_t problems = loadProblemCount(diff))
        s += QStringLiteral(", ") + countOf(problems, "problem", "problems");
    return s;
}

} // namespace shardscope::model
