// SPDX-License-Identifier: MIT
#include "loadmarks.h"

#include "formatting.h"

#include <QCoreApplication>
#include <shardscope/checkpoint.h>
#include <shardscope/session.h>

#include <unordered_map>
#include <unordered_set>

namespace shardscope::model {

QString loadMarkName(LoadMark mark)
{
    switch (mark) {
    case LoadMark::None:
        return {};
    case LoadMark::Loaded:
        return QStringLiteral("loads");
    case LoadMark::Verified:
        return QStringLiteral("verified");
    case LoadMark::Unconsumed:
        return QStringLiteral("not read");
    case LoadMark::Problem:
        return QStringLiteral("problem");
    case LoadMark::Mismatch:
        return QStringLiteral("mismatch");
    case LoadMark::Unreadable:
        return QStringLiteral("unreadable");
    case LoadMark::KeptAtInit:
        return QStringLiteral("kept at init");
    }
    return {};
}

QString groupLoadText(LoadMark worst, quint64 count)
{
    if (worst == LoadMark::None)
        return {};
    QString what = loadMarkName(worst);
    if (worst == LoadMark::Loaded)
        what = QCoreApplication::translate("shardscope", "loaded");
    else if (worst == LoadMark::Mismatch)
        what = QCoreApplication::translate("shardscope", "mismatched");
    else if (worst == LoadMark::Problem && count > 1)
        what = QCoreApplication::translate("shardscope", "problems");
    return QCoreApplication::translate("shardscope", "%1 %2", "count, mark")
        .arg(formatCount(count), what);
}

namespace {

QString text(std::string_view s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

} // namespace

LoadMark verifyMark(const ParamCheck &p)
{
    if (!p.roundTrip)
        return LoadMark::Mismatch;
    switch (p.outcome) {
    case ParamCheck::Outcome::Identical:
        return LoadMark::Verified;
    case ParamCheck::Outcome::Mismatch:
        return LoadMark::Mismatch;
    case ParamCheck::Outcome::KeptInitial:
        return LoadMark::KeptAtInit;
    case ParamCheck::Outcome::Unreadable:
        return LoadMark::Unreadable;
    case ParamCheck::Outcome::WrongSource:
        return LoadMark::Problem;
    case ParamCheck::Outcome::Skipped:
    case ParamCheck::Outcome::NotChecked:
        break;
    }
    return LoadMark::None;
}

std::shared_ptr<const LoadMarkSet> loadMarks(std::shared_ptr<const DiffResult> diffSnapshot,
                                             std::shared_ptr<const VerifyReport> verification,
                                             std::shared_ptr<const CheckpointIndex> index)
{
    auto set = std::make_shared<LoadMarkSet>();
    set->diff = std::move(diffSnapshot);
    set->verification = std::move(verification);
    set->index = index;
    const DiffResult *diff = set->diff.get();
    if (!diff)
        return set;
    std::vector<KeyMark> &out = set->marks;
    // A key's mark: by its item in the index where the diff names one (no hashing), else by key.
    const size_t items = index ? index->itemCount() : 0;
    std::vector<uint32_t> &byEntry = set->byEntry;
    byEntry.assign(items, 0);
    std::unordered_map<std::string_view, size_t> at; // key → position in `out`
    auto slotOf = [&](std::string_view key, int64_t item) -> uint32_t * {
        if (item >= 0 && size_t(item) < items && index->itemKey(size_t(item)) == key)
            return &byEntry[size_t(item)];
        return nullptr;
    };
    auto mark = [&](const KeyMark &m, int64_t item) {
        size_t pos = out.size();
        if (uint32_t *slot = slotOf(m.key, item)) {
            if (*slot == 0)
                *slot = uint32_t(out.size() + 1);
            pos = *slot - 1;
        } else {
            pos = at.emplace(m.key, out.size()).first->second;
        }
        if (pos == out.size())
            out.push_back(m);
        else if (m.mark > out[pos].mark)
            out[pos] = m;
    };
    size_t sources = diff->unconsumed.size();
    for (const DiffEntry &e : diff->entries)
        sources += e.sources.size() + e.unreadKeys.size();
    out.reserve(sources);
    if (!items)
        at.reserve(sources);

    // Kept at init where the outcome says so (a partial load); otherwise a parameter the load
    // does not fill makes it raise.
    const std::unordered_set<std::string_view> kept(diff->outcome.keptAtInit.begin(),
                                                    diff->outcome.keptAtInit.end());
    const std::unordered_set<std::string_view> optKept(diff->outcome.optimizerKeptAtInit.begin(),
                                                       diff->outcome.optimizerKeptAtInit.end());
    std::unordered_map<std::string_view, const DiffEntry *> modelEntry;
    for (const DiffEntry &e : diff->entries) {
        if (e.section == Section::Model)
            modelEntry.emplace(e.name, &e);
        const bool keptAtInit = kept.count(e.name) || optKept.count(e.name);
        LoadMark m = LoadMark::Loaded;
        if (keptAtInit)
            m = LoadMark::KeptAtInit;
        else if (!e.realLoadFills)
            m = LoadMark::Problem;
        else if (e.status == LoadStatus::Unreadable)
            m = LoadMark::Unreadable;
        else if (isLoadProblem(e)) // a narrowing cast too: the one rule the counts use
            m = LoadMark::Problem;
        for (const DiffSource &s : e.sources)
            mark({s.key, m, &e}, s.entry);
        // Its data is there, under keys the load does not read: the parameter's fate is theirs.
        for (size_t i = 0; i < e.unreadKeys.size(); ++i)
            mark({e.unreadKeys[i], keptAtInit ? LoadMark::KeptAtInit : LoadMark::Problem, &e,
                  nullptr, nullptr, true},
                 i < e.unreadEntries.size() ? e.unreadEntries[i] : -1);
    }
    for (const UnconsumedKey &u : diff->unconsumed)
        mark({u.key, LoadMark::Unconsumed, nullptr, &u}, u.entry);

    if (!set->verification)
        return set;
    // The verification's outcome replaces the diff's for the keys a parameter draws from:
    // "verified" replaces "loads"; a problem either found stays.
    for (const ParamCheck &p : set->verification->result.params) {
        const LoadMark m = verifyMark(p);
        auto e = modelEntry.find(p.name);
        if (m == LoadMark::None || e == modelEntry.end())
            continue;
        for (const DiffSource &s : e->second->sources) {
            size_t pos = 0;
            if (const uint32_t *slot = slotOf(s.key, s.entry)) {
                if (*slot == 0)
                    continue;
                pos = *slot - 1;
            } else if (auto it = at.find(s.key); it != at.end()) {
                pos = it->second;
            } else {
                continue;
            }
            KeyMark &k = out[pos];
            if (k.mark == LoadMark::Loaded || m > k.mark) {
                k.mark = k.mark == LoadMark::Loaded ? m : std::max(m, k.mark);
                k.entry = e->second;
                k.check = &p;
            }
        }
    }
    return set;
}

QString describe(const KeyMark &m)
{
    if (m.unconsumed)
        return m.unconsumed->note.empty() ? QStringLiteral("no expected parameter reads it")
                                          : QString::fromStdString(m.unconsumed->note);
    if (!m.entry)
        return {};
    const DiffEntry &e = *m.entry;
    QString line = QString::fromStdString(e.name) + QStringLiteral(": ");
    if (m.check) {
        line += QStringLiteral("verified ") + text(outcomeName(m.check->outcome));
        if (!m.check->note.empty())
            line += QStringLiteral(" — ") + QString::fromStdString(m.check->note);
        return line;
    }
    if (m.unread)
        line += QStringLiteral("holds its data, but the load does not read it");
    switch (m.mark) {
    case LoadMark::KeptAtInit:
        line += m.unread ? QStringLiteral("; the parameter keeps its initial values")
                         : QStringLiteral("the load does not read it; it keeps its initial "
                                          "values");
        return line;
    case LoadMark::Loaded:
        return line + text(statusName(e.status));
    default:
        if (!m.unread)
            line += text(statusName(e.status));
        if (!e.reason.empty())
            line += QStringLiteral(" — ") + QString::fromStdString(e.reason);
        return line;
    }
}

} // namespace shardscope::model
