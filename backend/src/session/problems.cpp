// SPDX-License-Identifier: MIT
// A flood of problems folded by cause and file: one missing data file is one line, not 7,200.
#include "shardscope/session.h"

#include <cctype>
#include <map>
#include <tuple>

namespace shardscope {

namespace {

// A message cut at its numbers: the text between them, and the numbers.
struct Shape
{
    std::vector<std::string> text;
    std::vector<std::string> numbers;
};

Shape shapeOf(std::string_view m)
{
    Shape s;
    s.text.emplace_back();
    for (size_t i = 0; i < m.size();) {
        if (std::isdigit(static_cast<unsigned char>(m[i]))) {
            size_t j = i;
            while (j < m.size() && std::isdigit(static_cast<unsigned char>(m[j])))
                ++j;
            s.numbers.emplace_back(m.substr(i, j - i));
            s.text.emplace_back();
            i = j;
        } else {
            s.text.back() += m[i++];
        }
    }
    return s;
}

std::string withThousands(size_t n)
{
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0)
            out += ',';
        out += digits[i];
    }
    return out;
}

} // namespace

std::vector<ProblemGroup> groupProblems(const std::vector<Problem> &problems)
{
    using Key = std::tuple<int, std::string, std::vector<std::string>>;
    std::map<Key, size_t> at;
    std::vector<ProblemGroup> groups;
    std::vector<Shape> shapes; // per group: the first member's, numbers blanked where they differ
    for (size_t i = 0; i < problems.size(); ++i) {
        const Problem &p = problems[i];
        Shape s = shapeOf(p.message);
        auto [it, fresh] = at.try_emplace(Key{int(p.effect), p.file, s.text}, groups.size());
        if (fresh) {
            groups.push_back({p.effect, p.file, {}, {}});
            shapes.push_back(std::move(s));
        } else {
            Shape &g = shapes[it->second];
            for (size_t n = 0; n < g.numbers.size(); ++n)
                if (g.numbers[n] != s.numbers[n])
                    g.numbers[n] = "…";
        }
        groups[it->second].members.push_back(i);
    }
    for (size_t g = 0; g < groups.size(); ++g) {
        const Shape &s = shapes[g];
        std::string cause = s.text[0];
        for (size_t n = 0; n < s.numbers.size(); ++n)
            cause += s.numbers[n] + s.text[n + 1];
        groups[g].cause = std::move(cause);
    }
    return groups;
}

std::string ProblemGroup::headline(const std::vector<Problem> &problems) const
{
    if (members.size() == 1)
        return problems[members.front()].toString();
    std::string out = file.empty() ? std::string() : file + ": ";
    out += withThousands(members.size()) + " keys";
    switch (effect) {
    case Problem::Effect::Unreadable:
        out += " unreadable";
        break;
    case Problem::Effect::Holes:
        out += " with holes";
        break;
    case Problem::Effect::Note:
        break;
    }
    out += ": " + cause;
    const Problem &first = problems[members.front()];
    out += " (first: key '" + first.key + "'";
    if (first.offset)
        out += " at offset " + std::to_string(*first.offset);
    out += ")";
    for (char &c : out) // one line, as Error::toString
        if (c == '\n' || c == '\r')
            c = ' ';
    return out;
}

} // namespace shardscope
