// SPDX-License-Identifier: MIT
#include "diffchoices.h"

#include "formatting.h"

#include <QCoreApplication>

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

QString loadSummary(const DiffResult &diff)
{
    const size_t kept = diff.outcome.keptAtInit.size();
    QString s = QCoreApplication::translate("shardscope", "Load: %1, %2 of %3 parameters filled")
                    .arg(loadActionName(diff.outcome.action), formatCount(diff.loadableModel),
                         formatCount(diff.expectedModel));
    if (kept)
        s += QCoreApplication::translate("shardscope", ", %1 silently kept at initial values")
                 .arg(formatCount(kept));
    return s;
}

} // namespace shardscope::model
