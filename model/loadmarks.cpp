// SPDX-License-Identifier: MIT
#include "loadmarks.h"

#include <shardscope/session.h>

#include <algorithm>
#include <unordered_map>

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

namespace {

bool isProblemStatus(LoadStatus s)
{
    return s == LoadStatus::ShapeMismatch || s == LoadStatus::Partial ||
           s == LoadStatus::Unreadable || s == LoadStatus::WrongSource;
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

std::vector<KeyMark> loadMarks(const DiffResult *diff, const VerifyReport *verification)
{
    std::vector<KeyMark> out;
    if (!diff)
        return out;
    std::unordered_map<std::string_view, size_t> at; // key → position in `out`
    auto mark = [&](const std::string &key, LoadMark m, std::string why) {
        auto [it, added] = at.emplace(key, out.size());
        if (added) {
            out.push_back({key, m, std::move(why)});
            return;
        }
        KeyMark &k = out[it->second];
        if (m > k.mark) {
            k.mark = m;
            k.why = std::move(why);
        }
    };
    size_t sources = diff->unconsumed.size();
    for (const DiffEntry &e : diff->entries)
        sources += e.sources.size();
    out.reserve(sources);

    const auto &kept = diff->outcome.keptAtInit;
    const auto &optKept = diff->outcome.optimizerKeptAtInit;
    std::unordered_map<std::string_view, const DiffEntry *> modelEntry;
    for (const DiffEntry &e : diff->entries) {
        if (e.section == Section::Model)
            modelEntry.emplace(e.name, &e);
        LoadMark m = LoadMark::Loaded;
        std::string why = e.name + ": " + std::string(statusName(e.status));
        const bool keptAtInit = !e.realLoadFills ||
                                std::find(kept.begin(), kept.end(), e.name) != kept.end() ||
                                std::find(optKept.begin(), optKept.end(), e.name) != optKept.end();
        if (keptAtInit) {
            m = LoadMark::KeptAtInit;
            why = e.name + ": the load does not read it; the parameter keeps its initial values";
        } else if (e.status == LoadStatus::Unreadable) {
            m = LoadMark::Unreadable;
        } else if (isProblemStatus(e.status) || e.wrongSource) {
            m = LoadMark::Problem;
        }
        if (m != LoadMark::Loaded && !e.reason.empty() && !keptAtInit)
            why += " — " + e.reason;
        for (const DiffSource &s : e.sources)
            mark(s.key, m, why);
        // Its data is there, under keys the load does not read: the parameter's fate is theirs.
        for (const std::string &k : e.unreadKeys)
            mark(k, keptAtInit ? LoadMark::KeptAtInit : LoadMark::Problem,
                 e.name + ": holds its data, but the load does not read it" +
                     (keptAtInit ? "; the parameter keeps its initial values"
                                 : "; the load raises") +
                     (e.reason.empty() ? std::string() : " — " + e.reason));
    }
    for (const UnconsumedKey &u : diff->unconsumed)
        mark(u.key, LoadMark::Unconsumed,
             u.note.empty() ? std::string("no expected parameter reads it") : u.note);

    if (!verification)
        return out;
    // The verification's outcome replaces the diff's for the keys a parameter draws from.
    for (const ParamCheck &p : verification->result.params) {
        const LoadMark m = verifyMark(p);
        auto e = modelEntry.find(p.name);
        if (m == LoadMark::None || e == modelEntry.end())
            continue;
        std::string why = p.name + ": verified " + std::string(outcomeName(p.outcome));
        if (!p.note.empty())
            why += " — " + p.note;
        for (const DiffSource &s : e->second->sources) {
            auto it = at.find(s.key);
            if (it == at.end())
                continue;
            KeyMark &k = out[it->second];
            // Verified replaces the diff's "loads"; a problem either found stays.
            if (m > k.mark || k.mark == LoadMark::Loaded) {
                k.mark = std::max(m, k.mark == LoadMark::Loaded ? LoadMark::None : k.mark);
                k.why = why;
            }
        }
    }
    return out;
}

} // namespace shardscope::model
