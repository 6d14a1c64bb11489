// SPDX-License-Identifier: MIT
#include "pyvalueformat.h"

#include <shardscope/pyvalue.h>

#include <charconv>
#include <cmath>
#include <string>

namespace shardscope::model {

namespace {

constexpr size_t InlineWidth = 88;

// Python's repr() of a float: the shortest digits that round-trip, fixed notation for decimal
// exponents in [-4, 16) ("0.00039", "10000.0"), scientific otherwise ("3.9e-05", "1e+16").
std::string pythonFloat(double v)
{
    if (std::isnan(v))
        return "nan";
    if (std::isinf(v))
        return v > 0 ? "inf" : "-inf";
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const std::string sci(buf, r.ptr);
    const size_t e = sci.find('e');
    const int exp = std::stoi(sci.substr(e + 1));
    if (exp < -4 || exp >= 16)
        return sci;
    const bool neg = sci[0] == '-';
    std::string digits;
    for (size_t i = neg ? 1 : 0; i < e; ++i)
        if (sci[i] != '.')
            digits += sci[i];
    std::string out = neg ? "-" : "";
    if (exp < 0) {
        out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
        out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
        out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
    return out;
}

// PyValue::summary with Python's float repr.
std::string scalarText(const PyValue &v, size_t maxLen)
{
    return v.kind == PyValue::Kind::Float ? pythonFloat(v.real) : v.summary(maxLen);
}

class Formatter
{
public:
    explicit Formatter(int maxLines)
        : m_maxLines(maxLines)
    {}

    std::string run(const PyValue &v)
    {
        write(v, 0);
        if (m_elided)
            m_out += "\n… (output truncated)";
        return m_out;
    }

private:
    static bool isContainer(const PyValue &v)
    {
        using K = PyValue::Kind;
        return v.kind == K::Tuple || v.kind == K::List || v.kind == K::Set || v.kind == K::Dict ||
               v.kind == K::Object;
    }

    static std::string className(const PyValue &v)
    {
        return v.text.empty() ? v.name : v.text + "." + v.name;
    }

    // One-line form, or nothing when it would exceed `limit` characters.
    static bool compact(const PyValue &v, size_t limit, std::string &out)
    {
        using K = PyValue::Kind;
        const size_t start = out.size();
        auto over = [&] { return out.size() - start > limit; };
        auto seq = [&](const std::vector<PyValue> &items, const char *open, const char *close) {
            out += open;
            for (size_t i = 0; i < items.size(); ++i) {
                if (i)
                    out += ", ";
                if (!compact(items[i], limit, out) || over())
                    return false;
            }
            if (items.size() == 1 && v.kind == K::Tuple)
                out += ",";
            out += close;
            return !over();
        };
        switch (v.kind) {
        case K::Tuple:
            return seq(v.items, "(", ")");
        case K::List:
            return seq(v.items, "[", "]");
        case K::Set:
            return v.items.empty() ? (out += "set()", true) : seq(v.items, "{", "}");
        case K::Dict:
            out += "{";
            for (size_t i = 0; i < v.dict.size(); ++i) {
                if (i)
                    out += ", ";
                if (!compact(v.dict[i].first, limit, out))
                    return false;
                out += ": ";
                if (!compact(v.dict[i].second, limit, out) || over())
                    return false;
            }
            out += "}";
            return !over();
        case K::Object: {
            out += className(v) + "(";
            bool first = true;
            if (!v.items.empty() && (v.items[0].kind == K::Tuple || v.items[0].kind == K::List)) {
                for (const PyValue &a : v.items[0].items) {
                    if (!first)
                        out += ", ";
                    first = false;
                    if (!compact(a, limit, out) || over())
                        return false;
                }
            }
            if (v.items.size() > 1 && v.items[1].kind == K::Dict) {
                for (const auto &[k, val] : v.items[1].dict) {
                    if (!first)
                        out += ", ";
                    first = false;
                    out += k.kind == K::Str ? k.text : k.summary(40);
                    out += "=";
                    if (!compact(val, limit, out) || over())
                        return false;
                }
            } else if (v.items.size() > 1 && v.items[1].kind != K::None) {
                return false;
            }
            if ((v.items.size() > 2 && !v.items[2].items.empty()) || !v.dict.empty())
                return false;
            out += ")";
            return !over();
        }
        default:
            out += scalarText(v, limit);
            return !over();
        }
    }

    void newline(int indent)
    {
        if (++m_lines > m_maxLines) {
            m_elided = true;
            return;
        }
        m_out += '\n';
        m_out.append(size_t(indent) * 4, ' ');
    }
    bool full() const { return m_elided; }

    // "key: value," lines of a dict (or an object's dict items); false once the output is full.
    bool writeEntries(const std::vector<std::pair<PyValue, PyValue>> &entries, int indent)
    {
        for (const auto &[k, val] : entries) {
            newline(indent + 1);
            if (full())
                return false;
            write(k, indent + 1);
            m_out += ": ";
            write(val, indent + 1);
            m_out += ",";
        }
        return true;
    }

    void write(const PyValue &v, int indent)
    {
        using K = PyValue::Kind;
        if (full())
            return;
        std::string line;
        if (!isContainer(v) || compact(v, InlineWidth, line)) {
            if (!isContainer(v))
                line = scalarText(v, 4096);
            m_out += line;
            return;
        }
        auto seq = [&](const std::vector<PyValue> &items, const char *open, const char *close) {
            m_out += open;
            for (const PyValue &item : items) {
                newline(indent + 1);
                if (full())
                    return;
                write(item, indent + 1);
                m_out += ",";
            }
            newline(indent);
            m_out += close;
        };
        switch (v.kind) {
        case K::Tuple:
            seq(v.items, "(", ")");
            return;
        case K::List:
            seq(v.items, "[", "]");
            return;
        case K::Set:
            seq(v.items, "{", "}");
            return;
        case K::Dict:
            m_out += "{";
            if (!writeEntries(v.dict, indent))
                return;
            newline(indent);
            m_out += "}";
            return;
        case K::Object: {
            m_out += className(v) + "(";
            if (!v.items.empty() && (v.items[0].kind == K::Tuple || v.items[0].kind == K::List)) {
                for (const PyValue &a : v.items[0].items) {
                    newline(indent + 1);
                    write(a, indent + 1);
                    m_out += ",";
                }
            }
            if (v.items.size() > 1 && v.items[1].kind == K::Dict) {
                for (const auto &[k, val] : v.items[1].dict) {
                    newline(indent + 1);
                    if (full())
                        return;
                    m_out += k.kind == K::Str ? k.text : k.summary(40);
                    m_out += "=";
                    write(val, indent + 1);
                    m_out += ",";
                }
            } else if (v.items.size() > 1 && v.items[1].kind != K::None) {
                newline(indent + 1);
                m_out += "__state__=";
                write(v.items[1], indent + 1);
                m_out += ",";
            }
            if (v.items.size() > 2 && !v.items[2].items.empty()) {
                newline(indent + 1);
                m_out += "__items__=";
                write(v.items[2], indent + 1);
                m_out += ",";
            }
            if (!writeEntries(v.dict, indent))
                return;
            newline(indent);
            m_out += ")";
            return;
        }
        default:
            return;
        }
    }

    int m_maxLines;
    int m_lines = 0;
    bool m_elided = false;
    std::string m_out;
};

} // namespace

QString formatPyValue(const PyValue &value, int maxLines)
{
    return QString::fromStdString(Formatter(maxLines).run(value));
}

} // namespace shardscope::model
