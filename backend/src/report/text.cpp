// SPDX-License-Identifier: MIT
// Text for reports: valid UTF-8, Markdown and HTML escaping, prose with key-like words as code.
#include "report/reportparts.h"

#include "shardscope/escape.h"

namespace shardscope::report {

// Names come from checkpoints: control characters, invalid UTF-8 and the characters that hide or
// reorder text become visible escapes (shardscope/escape.h) so every report stays valid and says
// what the bytes are. Line breaks stay in blocks.
std::string validUtf8(std::string_view s)
{
    return visibleLines(s);
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
    std::string out(s);
    for (char &c : out)
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
    return visibleText(out);
}

namespace {

size_t longestRun(std::string_view s, char c)
{
    size_t best = 0, run = 0;
    for (char x : s) {
        run = x == c ? run + 1 : 0;
        best = std::max(best, run);
    }
    return best;
}

} // namespace

// An inline code span that no backtick in the text can close early (CommonMark).
std::string mdCode(std::string_view s, bool inTable)
{
    std::string text = visibleText(s); // a name: its line breaks shown, not folded
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

std::string mdBlock(std::string_view s, std::string_view lang)
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

namespace {

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

} // namespace

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
} // namespace shardscope::report

namespace shardscope::report {

json torchReadableJson(const TorchReadability &r)
{
    json limits = json::array();
    for (const TorchLimit &l : r.limits)
        limits.push_back({{"from", l.from ? json(l.from->text()) : json(nullptr)}, {"why", l.why}});
    return {{"from", r.from ? json(r.from->text()) : json(nullptr)},
            {"checked", {kOldestTorchChecked.text(), kNewestTorchChecked.text()}},
            {"text", r.text()},
            {"explained", r.explained()},
            {"limits", std::move(limits)}};
}

} // namespace shardscope::report
