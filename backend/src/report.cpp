// SPDX-License-Identifier: MIT
// Reports of a diff: Markdown, one self-contained HTML file, JSON.
#include "shardscope/report.h"
#include "shapes.h"

#include "keyfold.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace shardscope {

using detail::shapeText;

namespace {

using detail::SplitName;
// Keys in the order written: "schema" first, entries read top-down.
using json = nlohmann::ordered_json;

// ---------------------------------------------------------------- text

constexpr std::string_view kReplacement = "\xEF\xBF\xBD"; // U+FFFD

// Names come from checkpoints: invalid UTF-8 and control characters (which HTML forbids in
// text) become U+FFFD so every report stays valid.
std::string validUtf8(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            const bool control = (c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f;
            if (control)
                out += kReplacement;
            else
                out += char(c);
            ++i;
            continue;
        }
        size_t n = 0;
        unsigned char lo = 0x80, hi = 0xbf; // allowed range of the second byte
        if (c >= 0xc2 && c <= 0xdf) {
            n = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            if (c == 0xe0)
                lo = 0xa0; // overlong
            if (c == 0xed)
                hi = 0x9f; // surrogates
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            if (c == 0xf0)
                lo = 0x90;
            if (c == 0xf4)
                hi = 0x8f;
        }
        bool ok = n > 0 && i + n <= s.size();
        for (size_t k = 1; ok && k < n; ++k) {
            const auto b = static_cast<unsigned char>(s[i + k]);
            ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
        }
        // C1 controls (U+0080..U+009F) are as unwelcome in HTML as C0 ones.
        if (ok && n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0)
            ok = false;
        if (ok) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += kReplacement;
            ++i;
        }
    }
    return out;
}

std::string htmlEscape(std::string_view s)
{
    std::string out;
    out.reserve(s.size());
    for (char c : validUtf8(s)) {
        switch (c) {
        case '&':
            out += "&amp;";
            break;
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '"':
            out += "&quot;";
            break;
        case '\'':
            out += "&#39;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

std::string oneLine(std::string_view s)
{
    std::string out = validUtf8(s);
    for (char &c : out)
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
    return out;
}

size_t longestRun(std::string_view s, char c)
{
    size_t best = 0, run = 0;
    for (char x : s) {
        run = x == c ? run + 1 : 0;
        best = std::max(best, run);
    }
    return best;
}

// An inline code span that no backtick in the text can close early (CommonMark).
std::string mdCode(std::string_view s, bool inTable = false)
{
    std::string text = oneLine(s);
    if (text.empty())
        return "*(empty)*";
    if (inTable) { // GFM splits table cells at '|' even inside code spans
        std::string t;
        for (char c : text) {
            if (c == '|')
                t += '\\';
            t += c;
        }
        text = std::move(t);
    }
    const std::string fence(longestRun(text, '`') + 1, '`');
    const bool pad =
        text.front() == '`' || text.back() == '`' || (text.front() == ' ' && text.back() == ' ');
    return fence + (pad ? " " : "") + text + (pad ? " " : "") + fence;
}

std::string mdBlock(std::string_view s, std::string_view lang = "text")
{
    std::string text = validUtf8(s);
    if (text.empty() || text.back() != '\n')
        text += '\n';
    const std::string fence(std::max<size_t>(3, longestRun(text, '`') + 1), '`');
    return fence + std::string(lang) + "\n" + text + fence + "\n";
}

// Prose is inline (never at a line start), so only emphasis, code, HTML, entities, tables and
// inline links can misfire; "[x]" alone stays readable and literal.
std::string mdEscape(std::string_view s)
{
    const std::string text = oneLine(s);
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (std::string_view("\\`*_<>|~&").find(c) != std::string_view::npos ||
            (c == ']' && i + 1 < text.size() && text[i + 1] == '('))
            out += '\\';
        out += c;
    }
    return out;
}

bool isAlnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A word of prose that names a key, a pattern, a file or a flag: shown as code.
bool looksLikeKey(std::string_view t)
{
    if (t.size() < 3)
        return false;
    if (t.substr(0, 2) == "--" && isAlnum(t[2]))
        return true;
    bool letter = false, marker = false;
    for (size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        const bool high = static_cast<unsigned char>(c) >= 0x80;
        if (!(isAlnum(c) || high || std::string_view("_.{},/-").find(c) != std::string_view::npos))
            return false;
        letter = letter || (isAlnum(c) && !(c >= '0' && c <= '9'));
        if (c == '_' || c == '{')
            marker = true;
        // "a.b" with a word on each side of the dot; "e.g" is prose
        if (c == '.' && i >= 2 && i + 2 < t.size() && isAlnum(t[i - 1]) && isAlnum(t[i - 2]) &&
            isAlnum(t[i + 1]) && isAlnum(t[i + 2]))
            marker = true;
    }
    return letter && marker;
}

struct Segment
{
    std::string text;
    bool code = false;
};

// Prose cut into plain text and the key-like words in it.
std::vector<Segment> proseSegments(std::string_view s)
{
    std::vector<Segment> out;
    auto add = [&](std::string_view t, bool code) {
        if (t.empty())
            return;
        if (!out.empty() && out.back().code == code && !code)
            out.back().text += t;
        else
            out.push_back({std::string(t), code});
    };
    size_t i = 0;
    while (i < s.size()) {
        if (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r') {
            add(s.substr(i, 1), false);
            ++i;
            continue;
        }
        size_t end = i;
        while (end < s.size() &&
               !(s[end] == ' ' || s[end] == '\n' || s[end] == '\t' || s[end] == '\r'))
            ++end;
        std::string_view word = s.substr(i, end - i);
        size_t b = 0, e = word.size();
        while (b < e && std::string_view("(\"'").find(word[b]) != std::string_view::npos)
            ++b;
        while (e > b && std::string_view(".,;:)\"'").find(word[e - 1]) != std::string_view::npos)
            --e;
        const std::string_view core = word.substr(b, e - b);
        if (looksLikeKey(core)) {
            add(word.substr(0, b), false);
            add(core, true);
            add(word.substr(e), false);
        } else {
            add(word, false);
        }
        i = end;
    }
    return out;
}

std::string mdProse(std::string_view s)
{
    std::string out;
    for (const Segment &seg : proseSegments(s))
        out += seg.code ? mdCode(seg.text) : mdEscape(seg.text);
    return out;
}

std::string htmlProse(std::string_view s)
{
    std::string out;
    for (const Segment &seg : proseSegments(s))
        out += seg.code ? "<code>" + htmlEscape(seg.text) + "</code>" : htmlEscape(seg.text);
    return out;
}

std::string percent(size_t part, size_t whole)
{
    if (whole == 0)
        return "n/a";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * double(part) / double(whole));
    return buf;
}

std::string plural(size_t n, std::string_view one, std::string_view many)
{
    return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

std::string_view sectionName(Section s)
{
    switch (s) {
    case Section::Model:
        return "model";
    case Section::Optimizer:
        return "optimizer";
    case Section::Other:
        return "other";
    }
    return "other";
}

std::string dump(const json &j)
{
    // Keys from a checkpoint need not be UTF-8; dump() would throw on them.
    return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

// ---------------------------------------------------------------- folding into groups

struct PatternCount
{
    std::string pattern;
    size_t count = 0;
};

struct KeyList
{
    std::vector<PatternCount> patterns;
    size_t total = 0; ///< distinct keys
};

KeyList foldKeys(const std::vector<std::string> &keys)
{
    std::vector<std::string> unique;
    std::set<std::string_view> seen;
    for (const std::string &k : keys)
        if (seen.insert(k).second)
            unique.push_back(k);
    KeyList out;
    out.total = unique.size();
    for (auto &f : detail::foldNames(unique))
        out.patterns.push_back({std::move(f.pattern), f.members.size()});
    return out;
}

struct FoldInput
{
    std::string category; ///< only items of one category fold together
    std::string name;     ///< folded exactly
    std::vector<SplitName> texts;
};

struct FoldGroup
{
    std::string pattern;
    std::vector<size_t> members; ///< indices into the input, ascending
    std::vector<std::string> texts;
};

// Items whose names and texts differ only in their numeric fields, folded. A group's names
// fold exactly; its texts field by field (they describe the names, mostly by the same numbers).
std::vector<FoldGroup> foldItems(const std::vector<FoldInput> &items)
{
    using Key =
        std::tuple<std::string, std::vector<std::string>, std::vector<std::vector<std::string>>>;
    std::map<Key, size_t> at;
    std::vector<std::vector<size_t>> buckets;
    for (size_t i = 0; i < items.size(); ++i) {
        std::vector<std::vector<std::string>> textPieces;
        for (const SplitName &t : items[i].texts)
            textPieces.push_back(t.pieces);
        Key key{items[i].category, detail::splitName(items[i].name).pieces, std::move(textPieces)};
        auto [it, fresh] = at.try_emplace(std::move(key), buckets.size());
        if (fresh)
            buckets.emplace_back();
        buckets[it->second].push_back(i);
    }
    std::vector<FoldGroup> out;
    for (const auto &bucket : buckets) {
        std::vector<std::string> names;
        for (size_t i : bucket)
            names.push_back(items[i].name);
        for (const auto &folded : detail::foldNames(names)) {
            FoldGroup g;
            g.pattern = folded.pattern;
            for (size_t m : folded.members)
                g.members.push_back(bucket[m]);
            const size_t nTexts = items[g.members.front()].texts.size();
            for (size_t t = 0; t < nTexts; ++t) {
                std::vector<SplitName> texts;
                for (size_t m : g.members)
                    texts.push_back(items[m].texts[t]);
                g.texts.push_back(detail::foldTexts(texts));
            }
            out.push_back(std::move(g));
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const FoldGroup &a, const FoldGroup &b) {
        return a.members.front() < b.members.front();
    });
    return out;
}

// The value every member shares, or empty.
template<typename F>
std::string uniform(const std::vector<size_t> &members, F value)
{
    std::string first = value(members.front());
    for (size_t m : members)
        if (value(m) != first)
            return {};
    return first;
}

// ---------------------------------------------------------------- the layout diff's model

// Splits and renames that the real load performs are the rules working, not problems.
bool isProblem(const DiffEntry &e)
{
    return !e.realLoadFills || (e.status != LoadStatus::Ok && e.status != LoadStatus::Split &&
                                e.status != LoadStatus::Rename);
}

struct ProblemGroup
{
    Section section = Section::Model;
    LoadStatus status = LoadStatus::Ok;
    bool fills = true;
    std::string pattern;
    std::vector<size_t> entries;
    std::string reason, fix, fixExample, exampleName;
    std::string shape, dtype; ///< when all entries agree
    KeyList keys;             ///< on-disk keys drawn from
    KeyList requested;        ///< what a real load asks for
};

struct UnconsumedGroup
{
    std::string pattern;
    size_t count = 0;
    bool tensor = true;
    std::string note, shape, dtype;
};

struct DiffModel
{
    std::vector<ProblemGroup> groups;
    size_t problemEntries = 0;
    std::vector<UnconsumedGroup> unconsumed;
    KeyList keptAtInit, optimizerKeptAtInit, namedKeys;
};

DiffModel buildModel(const DiffResult &diff)
{
    DiffModel model;
    std::vector<size_t> problems;
    std::vector<FoldInput> items;
    for (size_t i = 0; i < diff.entries.size(); ++i) {
        const DiffEntry &e = diff.entries[i];
        if (!isProblem(e))
            continue;
        problems.push_back(i);
        const std::string category = std::to_string(int(e.section)) + "/" +
                                     std::to_string(int(e.status)) + "/" +
                                     (e.realLoadFills ? "1" : "0");
        items.push_back(
            {category, e.name, {detail::splitText(e.reason), detail::splitText(e.fix)}});
    }
    model.problemEntries = problems.size();
    for (FoldGroup &f : foldItems(items)) {
        ProblemGroup g;
        for (size_t m : f.members)
            g.entries.push_back(problems[m]);
        const DiffEntry &first = diff.entries[g.entries.front()];
        g.section = first.section;
        g.status = first.status;
        g.fills = first.realLoadFills;
        g.pattern = std::move(f.pattern);
        g.reason = std::move(f.texts[0]);
        g.fix = std::move(f.texts[1]);
        if (g.fix != first.fix) { // a pattern: show one runnable instance too
            g.fixExample = first.fix;
            g.exampleName = first.name;
        }
        g.shape = uniform(g.entries, [&](size_t i) { return shapeText(diff.entries[i].shape); });
        g.dtype = uniform(g.entries, [&](size_t i) { return diff.entries[i].dtype; });
        std::vector<std::string> keys, requested;
        for (size_t i : g.entries) {
            for (const DiffSource &s : diff.entries[i].sources)
                keys.push_back(s.key);
            for (const std::string &k : diff.entries[i].requestKeys)
                requested.push_back(k);
        }
        g.keys = foldKeys(keys);
        g.requested = foldKeys(requested);
        model.groups.push_back(std::move(g));
    }
    // What a real load does not fill first, then by section; otherwise in model order.
    std::stable_sort(
        model.groups.begin(), model.groups.end(), [](const ProblemGroup &a, const ProblemGroup &b) {
            return std::tuple(a.fills, int(a.section)) < std::tuple(b.fills, int(b.section));
        });

    std::vector<FoldInput> unconsumed;
    for (const UnconsumedKey &u : diff.unconsumed)
        unconsumed.push_back({u.tensor ? "t" : "o", u.key, {detail::splitText(u.note)}});
    for (FoldGroup &f : foldItems(unconsumed)) {
        UnconsumedGroup g;
        g.pattern = std::move(f.pattern);
        g.count = f.members.size();
        g.tensor = diff.unconsumed[f.members.front()].tensor;
        g.note = std::move(f.texts[0]);
        if (g.tensor) {
            g.shape =
                uniform(f.members, [&](size_t i) { return shapeText(diff.unconsumed[i].shape); });
            g.dtype = uniform(f.members, [&](size_t i) { return diff.unconsumed[i].dtype; });
        }
        model.unconsumed.push_back(std::move(g));
    }

    model.keptAtInit = foldKeys(diff.outcome.keptAtInit);
    model.optimizerKeptAtInit = foldKeys(diff.outcome.optimizerKeptAtInit);
    model.namedKeys = foldKeys(diff.outcome.namedKeys);
    return model;
}

// Badge colours: a class per meaning, never derived from the names diff.cpp prints.
std::string_view statusClass(LoadStatus s)
{
    switch (s) {
    case LoadStatus::Ok:
        return "b-ok";
    case LoadStatus::Split:
    case LoadStatus::Merge:
    case LoadStatus::Rename:
    case LoadStatus::Cast:
        return "b-info";
    case LoadStatus::Partial:
        return "b-warn";
    case LoadStatus::ShapeMismatch:
    case LoadStatus::Unloadable:
    case LoadStatus::Unreadable:
        return "b-bad";
    }
    return "b-bad";
}

std::string_view actionClass(const LoadOutcome &o)
{
    if (o.action == LoadOutcome::Action::Raises || !o.keptAtInit.empty())
        return "b-bad";
    if (o.action == LoadOutcome::Action::Loads && o.optimizerKeptAtInit.empty())
        return "b-ok";
    return "b-warn";
}

std::string_view changeClass(KeyChange::Kind k)
{
    switch (k) {
    case KeyChange::Kind::Added:
        return "b-info";
    case KeyChange::Kind::Renamed:
    case KeyChange::Kind::DtypeChanged:
        return "b-warn";
    case KeyChange::Kind::Removed:
    case KeyChange::Kind::ShapeChanged:
        return "b-bad";
    }
    return "b-bad";
}

std::string strictnessFlag(const DiffOptions &o)
{
    return "--dist-ckpt-strictness " + std::string(strictnessName(o.strictness)) +
           (o.strictLoad ? "" : " --no-strict-fsdp-dtensor-load");
}

std::string atInit(size_t n)
{
    return n == 1 ? " at its initial value" : " at their initial values";
}

std::string keptHeadline(size_t n, LoadOutcome::Action a)
{
    const bool logged = a == LoadOutcome::Action::LogsAndContinues;
    return std::string("A load would ") + (logged ? "" : "silently ") + "keep " +
           plural(n, "parameter", "parameters") + atInit(n);
}

std::string optimizerKeptHeadline(size_t n)
{
    return "A load would leave " + plural(n, "optimizer state", "optimizer states") + atInit(n);
}

std::string keptExplanation(LoadOutcome::Action a)
{
    switch (a) {
    case LoadOutcome::Action::LogsAndContinues:
        return "Megatron only logs a warning; training would go on with these weights untrained.";
    case LoadOutcome::Action::ReturnsAndContinues:
        return "Megatron only hands the keys back to its caller; training would go on with these "
               "weights untrained.";
    case LoadOutcome::Action::Silent:
        return "Nothing raises or logs: training would go on with these weights untrained.";
    default:
        return "The load does not fail on them: training would go on with these weights "
               "untrained.";
    }
}

constexpr size_t kShownKeys = 5;

// A fix that is a command line reads best as a code block, prose as prose.
bool isCommand(std::string_view fix)
{
    for (std::string_view tool :
         {"checkpoint_inspector.py", "shardscope-cli", "python", "torchrun"})
        if (fix.substr(0, tool.size()) == tool)
            return true;
    return fix.find('\n') != std::string_view::npos;
}

std::string mdFix(std::string_view fix)
{
    return isCommand(fix) ? "\n\n" + mdBlock(fix) : " " + mdProse(fix) + "\n";
}

// ---------------------------------------------------------------- Markdown

std::string mdKeyList(const KeyList &keys, size_t limit = kShownKeys)
{
    std::string out;
    size_t shown = 0, covered = 0;
    for (const PatternCount &p : keys.patterns) {
        if (shown == limit)
            break;
        out += (shown ? ", " : "") + mdCode(p.pattern);
        if (p.count > 1)
            out += " (" + std::to_string(p.count) + ")";
        ++shown;
        covered += p.count;
    }
    if (covered < keys.total)
        out += ", … and " + std::to_string(keys.total - covered) + " more";
    return out;
}

// One bullet per pattern; prefix "> " puts them in a block quote.
std::string mdPatternBullets(const KeyList &keys, std::string_view prefix)
{
    std::string out;
    for (const PatternCount &p : keys.patterns) {
        out += std::string(prefix) + "- " + mdCode(p.pattern);
        if (p.count > 1)
            out += " (" + std::to_string(p.count) + ")";
        out += "\n";
    }
    return out;
}

std::string mdReproduce(const ReportContext &ctx)
{
    std::string out = "## Reproduce\n\n";
    if (ctx.command.empty())
        return out + "The command was not recorded.\n";
    return out + mdBlock(ctx.command, "sh");
}

std::string markdownReport(const DiffResult &diff, const ReportContext &ctx)
{
    const DiffModel model = buildModel(diff);
    const DiffOptions &opt = diff.options;
    std::string md = "# ShardScope load report\n\n";
    md += "| | |\n|---|---|\n";
    md += "| Checkpoint | " + mdCode(diff.checkpoint, true) +
          (diff.format.empty() ? "" : " (" + mdCode(diff.format, true) + ")") + " |\n";
    md += "| Against | " + mdCode(diff.against, true) + " |\n";
    md += "| Strictness | " + mdCode(strictnessName(opt.strictness), true) + ", strict load " +
          (opt.strictLoad ? "on" : "off") + " |\n";
    md += std::string("| Optimizer | ") + (opt.includeOptimizer ? "included" : "not compared") +
          " |\n";
    if (!opt.disabledRules.empty()) {
        md += "| Disabled rules |";
        for (size_t i = 0; i < opt.disabledRules.size(); ++i)
            md += (i ? ", " : " ") + mdCode(opt.disabledRules[i], true);
        md += " |\n";
    }
    if (!ctx.generatedAt.empty())
        md += "| Generated | " + mdEscape(ctx.generatedAt) + " |\n";

    md += "\n## Summary\n\n";
    if (!model.keptAtInit.patterns.empty()) {
        md += "> [!CAUTION]\n> **" + keptHeadline(model.keptAtInit.total, diff.outcome.action) +
              ".** " + keptExplanation(diff.outcome.action) + "\n>\n";
        md += mdPatternBullets(model.keptAtInit, "> ");
        md += "\n";
    }
    if (!model.optimizerKeptAtInit.patterns.empty()) {
        md += "> [!WARNING]\n> **" + optimizerKeptHeadline(model.optimizerKeptAtInit.total) +
              ".**\n>\n";
        md += mdPatternBullets(model.optimizerKeptAtInit, "> ");
        md += "\n";
    }
    if (!diff.outcome.loadedWrong.empty()) {
        md += "> [!CAUTION]\n> **A load would silently fill " +
              plural(diff.outcome.loadedWrong.size(), "tensor", "tensors") +
              " from the wrong key** (another EP rank's experts).\n>\n";
        md += mdPatternBullets(foldKeys(diff.outcome.loadedWrong), "> ");
        md += "\n";
    }
    md += "- **Model:** " + std::to_string(diff.loadableModel) + " of " +
          plural(diff.expectedModel, "parameter", "parameters") + " loadable by a real load (" +
          percent(diff.loadableModel, diff.expectedModel) + ")\n";
    if (opt.includeOptimizer)
        md += "- **Optimizer:** " + std::to_string(diff.loadableOptimizer) + " of " +
              plural(diff.expectedOptimizer, "state", "states") + " loadable by a real load (" +
              percent(diff.loadableOptimizer, diff.expectedOptimizer) + ")\n";
    md += "- **Real load** (" + mdCode(strictnessFlag(opt)) +
          "): " + mdCode(actionName(diff.outcome.action)) + "\n";
    md += "- **Problems:** " + plural(model.problemEntries, "entry", "entries") + " in " +
          plural(model.groups.size(), "group", "groups") + "; " +
          plural(diff.unconsumed.size(), "checkpoint key", "checkpoint keys") + " unconsumed\n";
    md += std::string("- **Verdict:** ") + (diff.clean() ? "clean" : "not clean") + "\n";
    if (model.keptAtInit.patterns.empty() && diff.outcome.action != LoadOutcome::Action::Raises)
        md += "\nNo parameter would be left at its initial value.\n";
    if (diff.outcome.action == LoadOutcome::Action::Raises)
        md += "\n> [!WARNING]\n> **A real load would stop with an exception.**\n";
    if (!diff.outcome.message.empty())
        md += "\nWhat the load would report:\n\n" + mdBlock(diff.outcome.message);
    if (!model.namedKeys.patterns.empty())
        md += "\nKeys it names: " + mdKeyList(model.namedKeys, 20) + "\n";

    md += "\n## Problems\n\n";
    if (model.groups.empty())
        md += "None: every expected parameter loads as is.\n";
    else
        md += plural(model.problemEntries, "entry", "entries") +
              " that are not loadable as is, in " + plural(model.groups.size(), "group", "groups") +
              ".\n";
    for (size_t gi = 0; gi < model.groups.size(); ++gi) {
        const ProblemGroup &g = model.groups[gi];
        md += "\n### " + std::to_string(gi + 1) + ". " + mdCode(g.pattern) + "\n\n";
        md += mdCode(statusName(g.status)) + " · " +
              (g.fills ? "filled by a real load" : "**not filled by a real load**") + " · " +
              plural(g.entries.size(), std::string(sectionName(g.section)) + " entry",
                     std::string(sectionName(g.section)) + " entries");
        if (!g.shape.empty() || !g.dtype.empty())
            md +=
                " · expected " + (g.shape.empty() ? "" : mdCode(g.shape) + " ") + mdEscape(g.dtype);
        md += "\n\n";
        if (!g.reason.empty())
            md += "**Cause:** " + mdProse(g.reason) + "\n\n";
        if (!g.fix.empty()) {
            md += "**Fix:**" + mdFix(g.fix) + "\n";
            if (!g.fixExample.empty())
                md += "For " + mdCode(g.exampleName) + ":" + mdFix(g.fixExample) + "\n";
        }
        if (g.keys.total)
            md += "**On-disk keys:** " + mdKeyList(g.keys) + "\n\n";
        if (g.requested.total && !g.fills)
            md += "**Requested by a real load:** " + mdKeyList(g.requested) + "\n\n";
        while (md.size() > 1 && md[md.size() - 1] == '\n' && md[md.size() - 2] == '\n')
            md.pop_back();
    }

    md += "\n## Unconsumed checkpoint keys\n\n";
    if (model.unconsumed.empty()) {
        md += "None: every checkpoint key is used.\n";
    } else {
        md += plural(diff.unconsumed.size(), "key", "keys") +
              " that no expected parameter consumes (a plain DCP load ignores them silently).\n\n";
        for (const UnconsumedGroup &u : model.unconsumed) {
            md += "- " + mdCode(u.pattern);
            if (u.count > 1)
                md += " (" + std::to_string(u.count) + ")";
            if (!u.tensor)
                md += " — object";
            else if (!u.shape.empty() || !u.dtype.empty())
                md += " — " + (u.shape.empty() ? "" : mdCode(u.shape) + " ") + mdEscape(u.dtype);
            if (!u.note.empty())
                md += ": " + mdProse(u.note);
            md += "\n";
        }
    }
    md += "\n" + mdReproduce(ctx);
    return md;
}

// ---------------------------------------------------------------- HTML

constexpr std::string_view kCss = R"css(
:root{--fg:#1f2328;--muted:#59636e;--bg:#fff;--panel:#f6f8fa;--border:#d1d9e0;
--ok:#1a7f37;--okbg:#dafbe1;--info:#0969da;--infobg:#ddf4ff;--warn:#9a6700;--warnbg:#fff8c5;
--bad:#cf222e;--badbg:#ffebe9}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--bg:#0d1117;
--panel:#151b23;--border:#3d444d;--ok:#3fb950;--okbg:#12261e;--info:#4493f8;--infobg:#121d2f;
--warn:#d29922;--warnbg:#272115;--bad:#f85149;--badbg:#25171c}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:24px 28px 40px}
h1{font-size:24px;margin:0 0 2px}
h2{font-size:18px;margin:32px 0 12px;padding-bottom:6px;border-bottom:1px solid var(--border)}
code,pre{font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
code{background:var(--panel);border-radius:4px;padding:1px 4px;overflow-wrap:anywhere}
pre{background:var(--panel);border:1px solid var(--border);border-radius:6px;padding:10px 12px;
margin:4px 0;white-space:pre-wrap;overflow-wrap:anywhere}
pre code{background:none;padding:0}
.meta,.muted{color:var(--muted)}
.meta{margin:0 0 18px}
table.kv{border-collapse:collapse}
.kv th{text-align:left;color:var(--muted);font-weight:600;padding:3px 18px 3px 0;
vertical-align:top;white-space:nowrap}
.kv td{padding:3px 0}
table.counts{border-collapse:collapse;min-width:280px}
.counts th,.counts td{border-bottom:1px solid var(--border);padding:5px 12px;text-align:left}
.counts td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(210px,1fr));gap:12px;
margin:18px 0}
.card{border:1px solid var(--border);border-radius:8px;padding:12px 14px;background:var(--panel)}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:22px;font-weight:600;font-variant-numeric:tabular-nums}
.bar{height:6px;border-radius:3px;background:var(--border);overflow:hidden;margin-top:8px}
.bar>span{display:block;height:100%;background:var(--ok)}
.bar.partial>span{background:var(--warn)}
.badge{display:inline-block;padding:0 8px;border-radius:999px;font-size:12px;font-weight:600;
line-height:20px;border:1px solid currentColor;white-space:nowrap}
.b-ok{color:var(--ok);background:var(--okbg)}
.b-info{color:var(--info);background:var(--infobg)}
.b-warn{color:var(--warn);background:var(--warnbg)}
.b-bad{color:var(--bad);background:var(--badbg)}
.alert{border:1px solid var(--bad);border-left-width:5px;background:var(--badbg);
border-radius:6px;padding:12px 16px;margin:16px 0}
.alert.warn{border-color:var(--warn);background:var(--warnbg)}
.alert.ok{border-color:var(--ok);background:var(--okbg)}
.alert h3{margin:0 0 6px;font-size:16px}
.alert p{margin:4px 0}
.alert ul{margin:6px 0 0;padding-left:20px}
details.group{border:1px solid var(--border);border-radius:8px;margin:8px 0}
details.group>summary{cursor:pointer;list-style:none;padding:8px 12px;display:flex;gap:8px;
align-items:center;flex-wrap:wrap}
details.group>summary::-webkit-details-marker{display:none}
details.group>summary::before{content:"\25B8";color:var(--muted);width:1em}
details.group[open]>summary::before{content:"\25BE"}
details.group[open]>summary{border-bottom:1px solid var(--border);background:var(--panel);
border-radius:8px 8px 0 0}
details.group>summary code{font-weight:600}
.count{margin-left:auto;color:var(--muted);white-space:nowrap}
.body{padding:10px 14px}
dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:8px 18px;margin:0}
dt{color:var(--muted);font-weight:600}
dd{margin:0;min-width:0}
ul.keys{margin:0;padding-left:18px}
footer{margin-top:36px;color:var(--muted);font-size:12px}
)css";

std::string htmlHead(std::string_view title)
{
    std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                    "<title>" +
                    htmlEscape(title) + "</title>\n<style>" + std::string(kCss) +
                    "</style>\n</head>\n<body>\n<main>\n";
    return h;
}

std::string htmlTail()
{
    return "<footer>Generated by ShardScope. This file is self-contained: it loads nothing "
           "from the network.</footer>\n</main>\n</body>\n</html>\n";
}

std::string hCode(std::string_view s)
{
    return "<code>" + htmlEscape(s) + "</code>";
}

std::string hBadge(std::string_view cls, std::string_view text)
{
    return "<span class=\"badge " + std::string(cls) + "\">" + htmlEscape(text) + "</span>";
}

std::string hPre(std::string_view s)
{
    return "<pre><code>" + htmlEscape(s) + "</code></pre>";
}

std::string hFix(std::string_view fix)
{
    return isCommand(fix) ? hPre(fix) : "<div>" + htmlProse(fix) + "</div>";
}

std::string hKeyList(const KeyList &keys, size_t limit = kShownKeys)
{
    std::string out = "<ul class=\"keys\">";
    size_t shown = 0, covered = 0;
    for (const PatternCount &p : keys.patterns) {
        if (shown == limit)
            break;
        out += "<li>" + hCode(p.pattern);
        if (p.count > 1)
            out += " <span class=\"muted\">×" + std::to_string(p.count) + "</span>";
        out += "</li>";
        ++shown;
        covered += p.count;
    }
    if (covered < keys.total)
        out += "<li class=\"muted\">… and " + std::to_string(keys.total - covered) + " more</li>";
    return out + "</ul>";
}

std::string hCard(std::string_view label, std::string_view valueHtml, std::string_view extraHtml)
{
    return "<div class=\"card\"><div class=\"label\">" + htmlEscape(label) +
           "</div><div class=\"value\">" + std::string(valueHtml) + "</div>" +
           std::string(extraHtml) + "</div>\n";
}

std::string hBar(size_t part, size_t whole)
{
    const int pct = whole ? int(100.0 * double(part) / double(whole) + 0.5) : 100;
    return std::string("<div class=\"bar") + (part < whole ? " partial" : "") +
           "\"><span style=\"width:" + std::to_string(pct) + "%\"></span></div>";
}

std::string hReproduce(const ReportContext &ctx)
{
    std::string out = "<section>\n<h2>Reproduce</h2>\n";
    if (ctx.command.empty())
        out += "<p class=\"muted\">The command was not recorded.</p>\n";
    else
        out += hPre(ctx.command) + "\n";
    return out + "</section>\n";
}

std::string htmlReport(const DiffResult &diff, const ReportContext &ctx)
{
    const DiffModel model = buildModel(diff);
    const DiffOptions &opt = diff.options;
    const LoadOutcome &outcome = diff.outcome;
    std::string h = htmlHead("ShardScope load report — " + diff.checkpoint);
    h += "<h1>ShardScope load report</h1>\n<p class=\"meta\">Checkpoint against layout";
    if (!ctx.generatedAt.empty())
        h += " · generated " + htmlEscape(ctx.generatedAt);
    h += "</p>\n<table class=\"kv\"><tbody>\n";
    h += "<tr><th>Checkpoint</th><td>" + hCode(diff.checkpoint) +
         (diff.format.empty() ? ""
                              : " <span class=\"muted\">" + htmlEscape(diff.format) + "</span>") +
         "</td></tr>\n";
    h += "<tr><th>Against</th><td>" + hCode(diff.against) + "</td></tr>\n";
    h += "<tr><th>Real load</th><td>" + hCode(strictnessFlag(opt)) + "</td></tr>\n";
    h += std::string("<tr><th>Optimizer</th><td>") +
         (opt.includeOptimizer ? "included" : "not compared") + "</td></tr>\n";
    if (!opt.disabledRules.empty()) {
        h += "<tr><th>Disabled rules</th><td>";
        for (size_t i = 0; i < opt.disabledRules.size(); ++i)
            h += (i ? ", " : "") + hCode(opt.disabledRules[i]);
        h += "</td></tr>\n";
    }
    h += "<tr><th>Verdict</th><td>" +
         (diff.clean() ? hBadge("b-ok", "clean") : hBadge("b-bad", "not clean")) +
         "</td></tr>\n</tbody></table>\n";

    h += "<section>\n<h2>Summary</h2>\n";
    if (!model.keptAtInit.patterns.empty()) {
        h += "<div class=\"alert\"><h3>⚠ " +
             htmlEscape(keptHeadline(model.keptAtInit.total, outcome.action)) + "</h3><p>" +
             htmlEscape(keptExplanation(outcome.action)) + "</p>" +
             hKeyList(model.keptAtInit, model.keptAtInit.patterns.size()) + "</div>\n";
    }
    if (!model.optimizerKeptAtInit.patterns.empty()) {
        h += "<div class=\"alert warn\"><h3>" +
             htmlEscape(optimizerKeptHeadline(model.optimizerKeptAtInit.total)) + "</h3>" +
             hKeyList(model.optimizerKeptAtInit, model.optimizerKeptAtInit.patterns.size()) +
             "</div>\n";
    }
    if (!outcome.loadedWrong.empty()) {
        const KeyList wrong = foldKeys(outcome.loadedWrong);
        h += "<div class=\"alert\"><h3>⚠ " +
             htmlEscape("A load would silently fill " +
                        plural(outcome.loadedWrong.size(), "tensor", "tensors") +
                        " from the wrong key (another EP rank's experts)") +
             "</h3>" + hKeyList(wrong, wrong.patterns.size()) + "</div>\n";
    }
    h += "<div class=\"cards\">\n";
    h += hCard("Model parameters loadable",
               std::to_string(diff.loadableModel) + " <span class=\"muted\">/ " +
                   std::to_string(diff.expectedModel) + "</span>",
               hBar(diff.loadableModel, diff.expectedModel));
    if (opt.includeOptimizer)
        h += hCard("Optimizer states loadable",
                   std::to_string(diff.loadableOptimizer) + " <span class=\"muted\">/ " +
                       std::to_string(diff.expectedOptimizer) + "</span>",
                   hBar(diff.loadableOptimizer, diff.expectedOptimizer));
    h += hCard("Real load", hBadge(actionClass(outcome), actionName(outcome.action)),
               "<div class=\"muted\">" + htmlEscape(strictnessName(opt.strictness)) + "</div>");
    h += hCard("Unconsumed keys", std::to_string(diff.unconsumed.size()),
               "<div class=\"muted\">ignored by a plain load</div>");
    h += "</div>\n";
    if (model.keptAtInit.patterns.empty() && outcome.action != LoadOutcome::Action::Raises)
        h += "<div class=\"alert ok\"><p>No parameter would be left at its initial "
             "value.</p></div>\n";
    if (outcome.action == LoadOutcome::Action::Raises)
        h += "<div class=\"alert warn\"><h3>A real load would stop with an exception</h3>" +
             (outcome.message.empty() ? "" : hPre(outcome.message)) + "</div>\n";
    else if (!outcome.message.empty())
        h += "<p>What the load would report:</p>\n" + hPre(outcome.message) + "\n";
    if (!model.namedKeys.patterns.empty())
        h += "<p>Keys it names:</p>\n" + hKeyList(model.namedKeys, 20) + "\n";
    h += "</section>\n";

    h += "<section>\n<h2>Problems</h2>\n";
    if (model.groups.empty())
        h += "<p>None: every expected parameter loads as is.</p>\n";
    else
        h += "<p>" + plural(model.problemEntries, "entry", "entries") +
             " that are not loadable as is, in " + plural(model.groups.size(), "group", "groups") +
             ".</p>\n";
    for (size_t gi = 0; gi < model.groups.size(); ++gi) {
        const ProblemGroup &g = model.groups[gi];
        h += std::string("<details class=\"group\"") + (!g.fills && gi < 5 ? " open" : "") +
             "><summary>" + hBadge(statusClass(g.status), statusName(g.status)) +
             (g.fills ? "" : hBadge("b-bad", "not filled by a real load")) + hCode(g.pattern) +
             "<span class=\"count\">" +
             plural(g.entries.size(), std::string(sectionName(g.section)) + " entry",
                    std::string(sectionName(g.section)) + " entries") +
             "</span></summary>\n<div class=\"body\"><dl>\n";
        h += std::string("<dt>Real load</dt><dd>") +
             (g.fills ? "fills it (its handlers apply every rule used)" : "does not fill it") +
             "</dd>\n";
        if (!g.shape.empty() || !g.dtype.empty())
            h += "<dt>Expected</dt><dd>" + (g.shape.empty() ? "" : hCode(g.shape) + " ") +
                 htmlEscape(g.dtype) + "</dd>\n";
        if (!g.reason.empty())
            h += "<dt>Cause</dt><dd>" + htmlProse(g.reason) + "</dd>\n";
        if (!g.fix.empty()) {
            h += "<dt>Fix</dt><dd>" + hFix(g.fix);
            if (!g.fixExample.empty())
                h += "<div class=\"muted\">For " + hCode(g.exampleName) + ":</div>" +
                     hFix(g.fixExample);
            h += "</dd>\n";
        }
        if (g.keys.total)
            h += "<dt>On-disk keys</dt><dd>" + hKeyList(g.keys) + "</dd>\n";
        if (g.requested.total && !g.fills)
            h += "<dt>Requested by a real load</dt><dd>" + hKeyList(g.requested) + "</dd>\n";
        h += "</dl></div>\n</details>\n";
    }
    h += "</section>\n";

    h += "<section>\n<h2>Unconsumed checkpoint keys</h2>\n";
    if (model.unconsumed.empty()) {
        h += "<p>None: every checkpoint key is used.</p>\n";
    } else {
        h += "<p>" + plural(diff.unconsumed.size(), "key", "keys") +
             " that no expected parameter consumes (a plain DCP load ignores them "
             "silently).</p>\n<table class=\"counts\"><thead><tr><th>Key</th><th>Count</th>"
             "<th>Stored</th><th>Note</th></tr></thead><tbody>\n";
        for (const UnconsumedGroup &u : model.unconsumed) {
            h += "<tr><td>" + hCode(u.pattern) + "</td><td class=\"n\">" + std::to_string(u.count) +
                 "</td><td>";
            if (!u.tensor)
                h += "object";
            else
                h += (u.shape.empty() ? "" : hCode(u.shape) + " ") + htmlEscape(u.dtype);
            h += "</td><td>" + htmlProse(u.note) + "</td></tr>\n";
        }
        h += "</tbody></table>\n";
    }
    h += "</section>\n";
    h += hReproduce(ctx);
    return h + htmlTail();
}

// ---------------------------------------------------------------- JSON

json keyListJson(const KeyList &keys)
{
    json a = json::array();
    for (const PatternCount &p : keys.patterns)
        a.push_back({{"pattern", p.pattern}, {"count", p.count}});
    return a;
}

json diffJson(const DiffResult &diff)
{
    json entries = json::array();
    for (const DiffEntry &e : diff.entries) {
        json sources = json::array();
        for (const DiffSource &s : e.sources)
            sources.push_back({{"key", s.key},
                               {"shape", s.shape},
                               {"dtype", s.dtype},
                               {"dim", s.dim},
                               {"begin", s.begin},
                               {"end", s.end},
                               {"stored_row", s.storedRow},
                               {"index", s.index}});
        entries.push_back({{"section", sectionName(e.section)},
                           {"name", e.name},
                           {"param", e.param},
                           {"state", e.state},
                           {"shape", e.shape},
                           {"dtype", e.dtype},
                           {"status", statusName(e.status)},
                           {"real_load_fills", e.realLoadFills},
                           {"rules", e.rules},
                           {"sources", std::move(sources)},
                           {"request_keys", e.requestKeys},
                           {"reason", e.reason},
                           {"fix", e.fix}});
    }
    json unconsumed = json::array();
    for (const UnconsumedKey &u : diff.unconsumed)
        unconsumed.push_back({{"key", u.key},
                              {"shape", u.shape},
                              {"dtype", u.dtype},
                              {"tensor", u.tensor},
                              {"note", u.note}});
    const LoadOutcome &o = diff.outcome;
    const DiffOptions &opt = diff.options;
    return {{"schema", "shardscope.diff/1"},
            {"checkpoint", diff.checkpoint},
            {"against", diff.against},
            {"format", diff.format},
            {"options",
             {{"disabled_rules", opt.disabledRules},
              {"strictness", strictnessName(opt.strictness)},
              {"strict_load", opt.strictLoad},
              {"include_optimizer", opt.includeOptimizer}}},
            {"counts",
             {{"expected_model", diff.expectedModel},
              {"loadable_model", diff.loadableModel},
              {"expected_optimizer", diff.expectedOptimizer},
              {"loadable_optimizer", diff.loadableOptimizer}}},
            {"clean", diff.clean()},
            {"outcome",
             {{"action", actionName(o.action)},
              {"message", o.message},
              {"named_keys", o.namedKeys},
              {"kept_at_init", o.keptAtInit},
              {"optimizer_kept_at_init", o.optimizerKeptAtInit},
              {"loaded_wrong", o.loadedWrong}}},
            {"entries", std::move(entries)},
            {"unconsumed", std::move(unconsumed)}};
}

std::string jsonReport(const DiffResult &diff, const ReportContext &ctx)
{
    const DiffModel model = buildModel(diff);
    const DiffOptions &opt = diff.options;
    json groups = json::array();
    for (const ProblemGroup &g : model.groups)
        groups.push_back({{"section", sectionName(g.section)},
                          {"status", statusName(g.status)},
                          {"real_load_fills", g.fills},
                          {"pattern", g.pattern},
                          {"count", g.entries.size()},
                          {"shape", g.shape},
                          {"dtype", g.dtype},
                          {"reason", g.reason},
                          {"fix", g.fix},
                          {"fix_example", g.fixExample},
                          {"keys", keyListJson(g.keys)},
                          {"keys_total", g.keys.total},
                          {"request_keys", keyListJson(g.requested)},
                          {"request_keys_total", g.requested.total}});
    json unconsumed = json::array();
    for (const UnconsumedGroup &u : model.unconsumed)
        unconsumed.push_back({{"pattern", u.pattern},
                              {"count", u.count},
                              {"tensor", u.tensor},
                              {"shape", u.shape},
                              {"dtype", u.dtype},
                              {"note", u.note}});
    json summary = {
        {"checkpoint", diff.checkpoint},
        {"against", diff.against},
        {"format", diff.format},
        {"strictness", strictnessName(opt.strictness)},
        {"strict_load", opt.strictLoad},
        {"include_optimizer", opt.includeOptimizer},
        {"model", {{"expected", diff.expectedModel}, {"loadable", diff.loadableModel}}},
        {"optimizer", {{"expected", diff.expectedOptimizer}, {"loadable", diff.loadableOptimizer}}},
        {"action", actionName(diff.outcome.action)},
        {"message", diff.outcome.message},
        {"kept_at_init", keyListJson(model.keptAtInit)},
        {"kept_at_init_total", model.keptAtInit.total},
        {"optimizer_kept_at_init", keyListJson(model.optimizerKeptAtInit)},
        {"optimizer_kept_at_init_total", model.optimizerKeptAtInit.total},
        {"problem_entries", model.problemEntries},
        {"unconsumed_keys", diff.unconsumed.size()},
        {"clean", diff.clean()}};
    return dump({{"schema", "shardscope.report/1"},
                 {"command", ctx.command},
                 {"generated_at", ctx.generatedAt},
                 {"summary", std::move(summary)},
                 {"groups", std::move(groups)},
                 {"unconsumed", std::move(unconsumed)},
                 {"diff", diffJson(diff)}});
}

// ---------------------------------------------------------------- checkpoint against checkpoint

constexpr KeyChange::Kind kKinds[] = {KeyChange::Kind::Removed, KeyChange::Kind::Added,
                                      KeyChange::Kind::Renamed, KeyChange::Kind::ShapeChanged,
                                      KeyChange::Kind::DtypeChanged};

struct ChangeGroup
{
    KeyChange::Kind kind = KeyChange::Kind::Added;
    std::string rule, pattern, otherPattern, detail;
    size_t count = 0;
};

std::vector<ChangeGroup> changeGroups(const CheckpointDiff &diff)
{
    std::vector<FoldInput> items;
    for (const KeyChange &c : diff.changes)
        items.push_back({std::to_string(int(c.kind)) + "/" + c.rule,
                         c.key,
                         {detail::splitName(c.otherKey), detail::splitText(c.detail)}});
    std::vector<ChangeGroup> out;
    for (FoldGroup &f : foldItems(items)) {
        const KeyChange &first = diff.changes[f.members.front()];
        out.push_back({first.kind, first.rule, std::move(f.pattern), std::move(f.texts[0]),
                       std::move(f.texts[1]), f.members.size()});
    }
    auto rank = [](KeyChange::Kind k) {
        return std::find(std::begin(kKinds), std::end(kKinds), k) - std::begin(kKinds);
    };
    std::stable_sort(out.begin(), out.end(), [&](const ChangeGroup &a, const ChangeGroup &b) {
        return rank(a.kind) < rank(b.kind);
    });
    return out;
}

size_t countOf(const CheckpointDiff &diff, KeyChange::Kind k)
{
    return size_t(std::count_if(diff.changes.begin(), diff.changes.end(),
                                [k](const KeyChange &c) { return c.kind == k; }));
}

std::string markdownCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx)
{
    const auto groups = changeGroups(diff);
    std::string md = "# ShardScope checkpoint comparison\n\n| | |\n|---|---|\n";
    md += "| First | " + mdCode(diff.first, true) + " |\n";
    md += "| Second | " + mdCode(diff.second, true) + " |\n";
    if (!ctx.generatedAt.empty())
        md += "| Generated | " + mdEscape(ctx.generatedAt) + " |\n";
    md += "\n## Summary\n\n| Change | Keys |\n|---|---:|\n";
    md += "| same | " + std::to_string(diff.same) + " |\n";
    for (KeyChange::Kind k : kKinds)
        md +=
            "| " + mdCode(changeName(k), true) + " | " + std::to_string(countOf(diff, k)) + " |\n";
    md += "\n## Changes\n\n";
    if (groups.empty())
        md += "None: the checkpoints hold the same keys, shapes and dtypes.\n";
    else
        md += plural(diff.changes.size(), "change", "changes") + " in " +
              plural(groups.size(), "group", "groups") + ".\n\n";
    for (const ChangeGroup &g : groups) {
        md += "- " + mdCode(changeName(g.kind)) + " " + mdCode(g.pattern);
        if (!g.otherPattern.empty() && g.otherPattern != g.pattern)
            md += " → " + mdCode(g.otherPattern);
        if (g.count > 1)
            md += " (" + std::to_string(g.count) + ")";
        if (!g.rule.empty())
            md += ", rule " + mdCode(g.rule);
        if (!g.detail.empty())
            md += ": " + mdProse(g.detail);
        md += "\n";
    }
    return md + "\n" + mdReproduce(ctx);
}

std::string htmlCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx)
{
    const auto groups = changeGroups(diff);
    std::string h = htmlHead("ShardScope checkpoint comparison — " + diff.first);
    h += "<h1>ShardScope checkpoint comparison</h1>\n<p class=\"meta\">Checkpoint against "
         "checkpoint";
    if (!ctx.generatedAt.empty())
        h += " · generated " + htmlEscape(ctx.generatedAt);
    h += "</p>\n<table class=\"kv\"><tbody>\n";
    h += "<tr><th>First</th><td>" + hCode(diff.first) + "</td></tr>\n";
    h += "<tr><th>Second</th><td>" + hCode(diff.second) + "</td></tr>\n";
    h += "<tr><th>Verdict</th><td>" +
         (diff.changes.empty() ? hBadge("b-ok", "same keys") : hBadge("b-warn", "changed")) +
         "</td></tr>\n</tbody></table>\n";
    h += "<section>\n<h2>Summary</h2>\n<table class=\"counts\"><thead><tr><th>Change</th>"
         "<th>Keys</th></tr></thead><tbody>\n";
    h += "<tr><td>" + hBadge("b-ok", "same") + "</td><td class=\"n\">" + std::to_string(diff.same) +
         "</td></tr>\n";
    for (KeyChange::Kind k : kKinds)
        h += "<tr><td>" + hBadge(changeClass(k), changeName(k)) + "</td><td class=\"n\">" +
             std::to_string(countOf(diff, k)) + "</td></tr>\n";
    h += "</tbody></table>\n</section>\n<section>\n<h2>Changes</h2>\n";
    if (groups.empty())
        h += "<p>None: the checkpoints hold the same keys, shapes and dtypes.</p>\n";
    else
        h += "<p>" + plural(diff.changes.size(), "change", "changes") + " in " +
             plural(groups.size(), "group", "groups") + ".</p>\n";
    for (const ChangeGroup &g : groups) {
        h += "<details class=\"group\"><summary>" +
             hBadge(changeClass(g.kind), changeName(g.kind)) + hCode(g.pattern);
        if (!g.otherPattern.empty() && g.otherPattern != g.pattern)
            h += "→" + hCode(g.otherPattern);
        h += "<span class=\"count\">" + plural(g.count, "key", "keys") +
             "</span></summary>\n<div class=\"body\"><dl>\n";
        h += "<dt>" + std::string(g.kind == KeyChange::Kind::Added ? "In second" : "In first") +
             "</dt><dd>" + hCode(g.pattern) + "</dd>\n";
        if (!g.otherPattern.empty())
            h += "<dt>In second</dt><dd>" + hCode(g.otherPattern) + "</dd>\n";
        if (!g.rule.empty())
            h += "<dt>Rule</dt><dd>" + hCode(g.rule) + "</dd>\n";
        if (!g.detail.empty())
            h += "<dt>Detail</dt><dd>" + htmlProse(g.detail) + "</dd>\n";
        h += "</dl></div>\n</details>\n";
    }
    h += "</section>\n" + hReproduce(ctx);
    return h + htmlTail();
}

json checkpointDiffJson(const CheckpointDiff &diff)
{
    json counts = json::object();
    for (KeyChange::Kind k : kKinds)
        counts[std::string(changeName(k))] = countOf(diff, k);
    json changes = json::array();
    for (const KeyChange &c : diff.changes)
        changes.push_back({{"kind", changeName(c.kind)},
                           {"key", c.key},
                           {"other_key", c.otherKey},
                           {"rule", c.rule},
                           {"detail", c.detail}});
    return {{"schema", "shardscope.checkpoint-diff/1"},
            {"first", diff.first},
            {"second", diff.second},
            {"same", diff.same},
            {"counts", std::move(counts)},
            {"changes", std::move(changes)}};
}

std::string jsonCheckpointReport(const CheckpointDiff &diff, const ReportContext &ctx)
{
    json groups = json::array();
    for (const ChangeGroup &g : changeGroups(diff))
        groups.push_back({{"kind", changeName(g.kind)},
                          {"pattern", g.pattern},
                          {"other_pattern", g.otherPattern},
                          {"rule", g.rule},
                          {"detail", g.detail},
                          {"count", g.count}});
    json summary = {{"first", diff.first},
                    {"second", diff.second},
                    {"same", diff.same},
                    {"changes", diff.changes.size()}};
    for (KeyChange::Kind k : kKinds)
        summary[std::string(changeName(k))] = countOf(diff, k);
    return dump({{"schema", "shardscope.report/1"},
                 {"command", ctx.command},
                 {"generated_at", ctx.generatedAt},
                 {"summary", std::move(summary)},
                 {"groups", std::move(groups)},
                 {"diff", checkpointDiffJson(diff)}});
}

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out)
        if (c >= 'A' && c <= 'Z')
            c = char(c - 'A' + 'a');
    return out;
}

} // namespace

std::optional<ReportFormat> reportFormatForPath(std::string_view path)
{
    const size_t slash = path.find_last_of("/\\");
    const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
    const size_t dot = file.rfind('.');
    if (dot == std::string_view::npos || dot == 0)
        return std::nullopt;
    const std::string ext = lower(file.substr(dot + 1));
    if (ext == "md")
        return ReportFormat::Markdown;
    if (ext == "html" || ext == "htm")
        return ReportFormat::Html;
    if (ext == "json")
        return ReportFormat::Json;
    return std::nullopt;
}

std::string renderReport(const DiffResult &diff, ReportFormat format, const ReportContext &ctx)
{
    switch (format) {
    case ReportFormat::Markdown:
        return markdownReport(diff, ctx);
    case ReportFormat::Html:
        return htmlReport(diff, ctx);
    case ReportFormat::Json:
        return jsonReport(diff, ctx);
    }
    return {};
}

std::string renderCheckpointDiffReport(const CheckpointDiff &diff, ReportFormat format,
                                       const ReportContext &ctx)
{
    switch (format) {
    case ReportFormat::Markdown:
        return markdownCheckpointReport(diff, ctx);
    case ReportFormat::Html:
        return htmlCheckpointReport(diff, ctx);
    case ReportFormat::Json:
        return jsonCheckpointReport(diff, ctx);
    }
    return {};
}

std::string diffToJson(const DiffResult &diff)
{
    return dump(diffJson(diff));
}

std::string checkpointDiffToJson(const CheckpointDiff &diff)
{
    return dump(checkpointDiffJson(diff));
}

} // namespace shardscope
