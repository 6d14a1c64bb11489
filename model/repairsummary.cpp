// SPDX-License-Identifier: MIT
#include "repairsummary.h"

#include "formatting.h"

#include <shardscope/fix.h>

#include <QCoreApplication>
#include <QStringList>

namespace shardscope::model {

namespace {

QString tr(const char *text)
{
    return QCoreApplication::translate("Repair", text);
}

QString text(std::string_view s)
{
    return displayText(s);
}

} // namespace

QString repairSummaryText(const FixResult &fix)
{
    if (fix.alreadyLoads)
        return tr("The checkpoint already loads as asked: nothing to repair, nothing written.");
    QStringList kinds;
    for (const FixChangeCount &c : fix.changes)
        kinds << QStringLiteral("%1 %2").arg(c.count).arg(text(c.kind));
    // Written but not a repair (--partial, or the output read back still fails to load): said
    // first, as the CLI does.
    QString s =
        (fix.repaired() ? tr("Repaired into %1: %2. %3 hard-linked, %4 symlinked, %5 copied; %6.")
                        : tr("Written into %1, NOT a repair: %2. %3 hard-linked, %4 symlinked, "
                             "%5 copied; %6."))
            .arg(text(fix.output), kinds.join(QStringLiteral(", ")),
                 countOf(fix.filesLinked, "file", "files"), formatCount(fix.filesSymlinked),
                 formatCount(fix.filesCopied),
                 fix.bytesWritten == 0
                     ? tr("no tensor data written")
                     : tr("%1 of tensor data written into %2")
                           .arg(countOf(fix.bytesWritten, "byte", "bytes"),
                                fix.filesWritten
                                    ? tr("%1 written anew")
                                          .arg(countOf(fix.filesWritten, "file", "files"))
                                    : tr("one new data file")));
    if (fix.after)
        s += QLatin1Char(' ') + tr("The load now fills %1 of %2 parameters (%3).")
                                    .arg(fix.after->loadableModel)
                                    .arg(fix.after->expectedModel)
                                    .arg(text(actionName(fix.after->outcome.action)));
    if (!fix.stillFails.empty())
        s += QLatin1Char(' ') + tr("The load still fails on it: %1.").arg(text(fix.stillFails));
    if (!fix.blockers.empty())
        s += QLatin1Char(' ') +
             tr("%1 could not be repaired (first: %2).")
                 .arg(countOf(fix.blockers.size(), "entry", "entries"), text(fix.blockers.front()));
    return s + QLatin1Char(' ') + tr("Check it with: %1").arg(text(fix.diffCommand));
}

QString repairBlockedText(const FixResult &fix)
{
    if (fix.blockers.empty())
        return tr("Nothing that a fix can repair; nothing was written.");
    return tr("Not repaired: %1 cannot be repaired (first: %2); nothing was written.")
        .arg(countOf(fix.blockers.size(), "entry", "entries"), text(fix.blockers.front()));
}

} // namespace shardscope::model
