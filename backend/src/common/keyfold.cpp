// SPDX-License-Identifier: MIT
#include "shardscope/keyfold.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

namespace shardscope {

namespace {

bool isDigit(char c)
{
    return c >= '0' && c <= '9';
}
bool isAlpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A field's digits must print back the same: no leading zeros, and they fit an int64.
std::optional<int64_t> number(std::string_view s)
{
    if (s.empty() || s.size() > 18 || (s.size() > 1 && s[0] == '0'))
        return std::nullopt;
    int64_t v = 0;
    for (char c : s) {
        if (!isDigit(c))
            return std::nullopt;
        v = v * 10 + (c - '0');
    }
    return v;
}

// Appends other to out: its first piece continues out's last one.
void append(SplitName &out, SplitName &&other)
{
    out.pieces.back() += other.pieces.front();
    for (size_t i = 0; i < other.values.size(); ++i) {
        out.values.push_back(other.values[i]);
        out.pieces.push_back(std::move(other.pieces[i + 1]));
    }
}

void addField(SplitName &out, int64_t v)
{
    out.values.push_back(v);
    out.pieces.emplace_back();
}

// Characters of a key inside text; bytes of multibyte UTF-8 count, so such keys stay whole.
bool isTokenChar(char c)
{
    return isDigit(c) || isAlpha(c) || c == '_' || c == '.' || c == '-' || c == '/' ||
           static_cast<unsigned char>(c) >= 0x80;
}

bool endsWithWord(std::string_view text, std::string_view word)
{
    if (text.size() < word.size())
        return false;
    const std::string_view tail = text.substr(text.size() - word.size());
    for (size_t i = 0; i < word.size(); ++i) {
        char c = tail[i];
        if (c >= 'A' && c <= 'Z')
            c = char(c - 'A' + 'a');
        if (c != word[i])
            return false;
    }
    const size_t before = text.size() - word.size();
    return before == 0 || !(isAlpha(text[before - 1]) || isDigit(text[before - 1]));
}

// "layer 3", "experts 5": the number is an index like those in names.
bool followsIndexWord(std::string_view text)
{
    for (std::string_view w : {"layer ", "layers ", "expert ", "experts "})
        if (endsWithWord(text, w))
            return true;
    return false;
}

} // namespace

SplitName splitName(std::string_view name)
{
    SplitName out;
    out.pieces.emplace_back();
    size_t pos = 0;
    while (true) {
        const size_t dot = name.find('.', pos);
        const std::string_view part =
            name.substr(pos, dot == std::string_view::npos ? std::string_view::npos : dot - pos);
        if (auto v = number(part)) {
            addField(out, *v);
        } else {
            bool folded = false;
            for (std::string_view prefix : {std::string_view("weight"), std::string_view("bias")}) {
                if (part.substr(0, prefix.size()) != prefix)
                    continue;
                size_t end = prefix.size();
                while (end < part.size() && isDigit(part[end]))
                    ++end;
                if (auto index = number(part.substr(prefix.size(), end - prefix.size()))) {
                    out.pieces.back() += prefix;
                    addField(out, *index);
                    out.pieces.back() += part.substr(end);
                    folded = true;
                }
                break;
            }
            if (!folded)
                out.pieces.back() += part;
        }
        if (dot == std::string_view::npos)
            break;
        out.pieces.back() += '.';
        pos = dot + 1;
    }
    return out;
}

SplitName splitText(std::string_view text)
{
    SplitName out;
    out.pieces.emplace_back();
    size_t i = 0;
    while (i < text.size()) {
        if (!isTokenChar(text[i])) {
            out.pieces.back() += text[i++];
            continue;
        }
        size_t end = i;
        while (end < text.size() && isTokenChar(text[end]))
            ++end;
        const std::string_view token = text.substr(i, end - i);
        const bool keyLike = token.find('.') != std::string_view::npos &&
                             std::any_of(token.begin(), token.end(), isAlpha);
        if (keyLike) {
            append(out, splitName(token));
        } else {
            // A sentence may end right after the number: "in layer 3."
            const size_t digits = token.find_first_not_of("0123456789");
            const std::string_view num = token.substr(0, digits);
            const bool onlyDots = digits == std::string_view::npos ||
                                  token.find_first_not_of('.', digits) == std::string_view::npos;
            const auto v = onlyDots ? number(num) : std::nullopt;
            if (v && followsIndexWord(out.pieces.back())) {
                addField(out, *v);
                out.pieces.back() += token.substr(num.size());
            } else {
                out.pieces.back() += token;
            }
        }
        i = end;
    }
    return out;
}

std::string foldValues(const std::vector<int64_t> &sortedUnique)
{
    const auto &v = sortedUnique;
    if (v.empty())
        return "{}";
    if (v.size() == 1)
        return std::to_string(v[0]);
    std::string out = "{";
    for (size_t i = 0; i < v.size();) {
        size_t j = i + 1;
        while (j < v.size() && v[j] == v[j - 1] + 1)
            ++j;
        if (i > 0)
            out += ',';
        // The whole set contiguous reads best as a range even for two values.
        if (j - i >= 3 || (i == 0 && j == v.size())) {
            out += std::to_string(v[i]) + ".." + std::to_string(v[j - 1]);
            i = j;
        } else {
            out += std::to_string(v[i]);
            ++i;
        }
    }
    return out + "}";
}

namespace {

std::string joinPattern(const std::vector<std::string> &pieces,
                        const std::vector<std::vector<int64_t>> &sets)
{
    std::string out = pieces[0];
    for (size_t i = 0; i < sets.size(); ++i)
        out += foldValues(sets[i]) + pieces[i + 1];
    return out;
}

// Rows of one skeleton while folding: fields [0, concrete.size()) still single values, the
// rest already folded into sets.
struct Row
{
    std::vector<int64_t> concrete;
    std::vector<std::vector<int64_t>> sets;
    std::vector<size_t> members;
};

void sortUnique(std::vector<int64_t> &v)
{
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Folds the last concrete field of every row: rows alike but for it merge, their values
// becoming one set. Each row stays an exact cartesian product of its values and sets.
std::vector<Row> foldLastField(std::vector<Row> rows)
{
    std::map<std::pair<std::vector<int64_t>, std::vector<std::vector<int64_t>>>, size_t> at;
    std::vector<Row> out;
    for (Row &r : rows) {
        const int64_t v = r.concrete.back();
        r.concrete.pop_back();
        auto [it, fresh] = at.try_emplace({r.concrete, r.sets}, out.size());
        if (fresh) {
            Row n;
            n.concrete = std::move(r.concrete);
            n.sets.reserve(r.sets.size() + 1);
            n.sets.push_back({v});
            for (auto &s : r.sets)
                n.sets.push_back(std::move(s));
            n.members = std::move(r.members);
            out.push_back(std::move(n));
        } else {
            Row &n = out[it->second];
            n.sets.front().push_back(v);
            n.members.insert(n.members.end(), r.members.begin(), r.members.end());
        }
    }
    for (Row &n : out)
        sortUnique(n.sets.front());
    return out;
}

} // namespace

std::vector<FoldedName> foldNames(const std::vector<std::string> &names)
{
    // Skeletons in order of first appearance; within one, distinct value tuples.
    std::map<std::vector<std::string>, size_t> skeletonAt;
    std::vector<std::vector<std::string>> skeletons;
    std::vector<std::vector<Row>> rowsOf;
    std::vector<std::map<std::vector<int64_t>, size_t>> rowAt;
    for (size_t i = 0; i < names.size(); ++i) {
        SplitName s = splitName(names[i]);
        auto [it, fresh] = skeletonAt.try_emplace(s.pieces, skeletons.size());
        if (fresh) {
            skeletons.push_back(s.pieces);
            rowsOf.emplace_back();
            rowAt.emplace_back();
        }
        const size_t k = it->second;
        auto [rit, rfresh] = rowAt[k].try_emplace(s.values, rowsOf[k].size());
        if (rfresh)
            rowsOf[k].push_back(Row{std::move(s.values), {}, {i}});
        else
            rowsOf[k][rit->second].members.push_back(i);
    }

    std::vector<FoldedName> out;
    for (size_t k = 0; k < skeletons.size(); ++k) {
        std::vector<Row> rows = std::move(rowsOf[k]);
        const size_t fields = skeletons[k].size() - 1;
        for (size_t f = 0; f < fields; ++f)
            rows = foldLastField(std::move(rows));
        for (Row &r : rows) {
            std::sort(r.members.begin(), r.members.end());
            out.push_back({joinPattern(skeletons[k], r.sets), std::move(r.members)});
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const FoldedName &a, const FoldedName &b) {
        return a.members.front() < b.members.front();
    });
    return out;
}

std::string foldTexts(const std::vector<SplitName> &texts)
{
    if (texts.empty())
        return {};
    const SplitName &first = texts.front();
    std::vector<std::vector<int64_t>> sets(first.values.size());
    for (const SplitName &t : texts)
        for (size_t i = 0; i < sets.size() && i < t.values.size(); ++i)
            sets[i].push_back(t.values[i]);
    for (auto &s : sets)
        sortUnique(s);
    return joinPattern(first.pieces, sets);
}

} // namespace shardscope
