// SPDX-License-Identifier: MIT
#include "reloadsummary.h"

#include "formatting.h"

#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>

#include <QCoreApplication>
#include <QStringList>

#include <map>

namespace shardscope::model {

namespace {

QString tr(const char *text)
{
    return QCoreApplication::translate("Reload", text);
}

} // namespace

QString describeReload(const CheckpointIndex &before, const CheckpointIndex &after,
                       const std::function<bool(uint64_t done, uint64_t total)> &progress)
{
    DiffOptions plain; // names as stored: a rename is a removal and an addition
    for (const RuleInfo &r : allRules())
        plain.disabledRules.push_back(r.name);
    bool stopped = false;
    const CheckpointDiff diff = diffCheckpoints(before, after, plain, [&](uint64_t d, uint64_t t) {
        stopped = stopped || (progress && !progress(d, t));
        return !stopped;
    });
    if (stopped)
        return {};
    size_t added = 0, removed = 0, reshaped = 0, retyped = 0;
    for (const KeyChange &c : diff.changes) {
        added += c.kind == KeyChange::Kind::Added;
        removed += c.kind == KeyChange::Kind::Removed || c.kind == KeyChange::Kind::Renamed;
        added += c.kind == KeyChange::Kind::Renamed;
        reshaped += c.kind == KeyChange::Kind::ShapeChanged;
        retyped += c.kind == KeyChange::Kind::DtypeChanged;
    }
    QStringList parts;
    if (added)
        parts << (added == 1 ? tr("1 key added") : tr("%1 keys added").arg(formatCount(added)));
    if (removed)
        parts << tr("%1 removed").arg(formatCount(removed));
    if (reshaped)
        parts << tr("%1 changed shape").arg(formatCount(reshaped));
    if (retyped)
        parts << tr("%1 changed dtype").arg(formatCount(retyped));

    std::map<std::string, uint64_t> sizes;
    for (size_t f = 0; f < before.files.size() && f < before.fileSizes.size(); ++f)
        sizes[before.files[f]] = before.fileSizes[f];
    QStringList appeared, went, resized;
    for (size_t f = 0; f < after.files.size() && f < after.fileSizes.size(); ++f) {
        auto it = sizes.find(after.files[f]);
        const bool missingNow = after.fileSizes[f] == UINT64_MAX;
        if (it == sizes.end())
            appeared << displayText(after.files[f]);
        else if (missingNow && it->second != UINT64_MAX)
            went << displayText(after.files[f]);
        else if (it->second != after.fileSizes[f])
            resized << displayText(after.files[f]);
        if (it != sizes.end())
            sizes.erase(it);
    }
    for (const auto &[name, size] : sizes)
        went << displayText(name);
    auto files = [](const QStringList &names) {
        return names.size() <= 3 ? names.join(QStringLiteral(", "))
                                 : tr("%1 files").arg(names.size());
    };
    if (!appeared.isEmpty())
        parts << tr("new data: %1").arg(files(appeared));
    if (!went.isEmpty())
        parts << tr("gone: %1").arg(files(went));
    if (!resized.isEmpty())
        parts << tr("changed size: %1").arg(files(resized));
    for (const char *fact : {"iteration", "save_id"}) {
        auto a = before.info.find(fact), b = after.info.find(fact);
        const std::string was = a == before.info.end() ? std::string("none") : a->second;
        const std::string now = b == after.info.end() ? std::string("none") : b->second;
        if (was != now)
            parts << QStringLiteral("%1 %2 → %3")
                         .arg(QString::fromLatin1(fact), displayText(was), displayText(now));
    }
    if (parts.isEmpty())
        return tr("Reloaded: nothing changed on disk");
    return tr("Reloaded: %1").arg(parts.join(QStringLiteral("; ")));
}

} // namespace shardscope::model
