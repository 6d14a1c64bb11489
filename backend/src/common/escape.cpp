// SPDX-License-Identifier: MIT
#include "shardscope/escape.h"

#include <cstdint>
#include <cstdio>

namespace shardscope {

namespace {

struct Piece
{
    size_t length = 1;      ///< bytes taken from the input
    int32_t codePoint = -1; ///< -1: an invalid byte
};

// One UTF-8 sequence at `i` (RFC 3629: no overlongs, surrogates or values past U+10FFFF).
Piece decode(std::string_view s, size_t i)
{
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80)
        return {1, c};
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf; // the second byte's range
    int32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
        lo = c == 0xe0 ? 0xa0 : lo;
        hi = c == 0xed ? 0x9f : hi;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
        lo = c == 0xf0 ? 0x90 : lo;
        hi = c == 0xf4 ? 0x8f : hi;
    }
    if (n == 0 || i + n > s.size())
        return {};
    for (size_t k = 1; k < n; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf))
            return {};
        cp = (cp << 6) | (b & 0x3f);
    }
    return {n, cp};
}

// Characters a terminal or a renderer acts on, or that hide and reorder text.
bool isHidden(int32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0xad || cp == 0x61c || cp == 0x180e ||
           (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
           (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) ||
           (cp >= 0xe0000 && cp <= 0xe007f);
}

void appendHex(std::string &out, const char *format, uint32_t v)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, format, v);
    out += buf;
}

enum class Mode { Text, Lines, Name, Shell };

std::string escape(std::string_view s, Mode mode)
{
    std::string out;
    out.reserve(s.size() + 2);
    for (size_t i = 0; i < s.size();) {
        const Piece p = decode(s, i);
        const std::string_view bytes = s.substr(i, p.length);
        i += p.length;
        if (p.codePoint < 0) {
            appendHex(out, "\\x%02x", static_cast<unsigned char>(bytes[0]));
            continue;
        }
        const int32_t cp = p.codePoint;
        if ((mode == Mode::Name || mode == Mode::Shell) &&
            (cp == '\\' || cp == '"' || cp == '\'')) {
            if (cp == '\\' || (mode == Mode::Name && cp == '"') ||
                (mode == Mode::Shell && cp == '\''))
                out += '\\';
            out += char(cp);
            continue;
        }
        if (!isHidden(cp)) {
            out += bytes;
            continue;
        }
        if (mode == Mode::Lines && (cp == '\n' || cp == '\t')) {
            out += char(cp);
            continue;
        }
        if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp < 0x80 || mode == Mode::Shell) {
            // The shell takes bytes, whatever its locale: \xNN for each byte of the sequence.
            for (char b : bytes)
                appendHex(out, "\\x%02x", static_cast<unsigned char>(b));
        } else if (cp < 0x10000) {
            appendHex(out, "\\u%04x", uint32_t(cp));
        } else {
            appendHex(out, "\\U%08x", uint32_t(cp));
        }
    }
    return out;
}

bool isPlainShellWord(std::string_view s)
{
    if (s.empty())
        return false;
    for (char c : s) {
        const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') ||
                           std::string_view("-_./=,:+@%").find(c) != std::string_view::npos;
        if (!plain)
            return false;
    }
    return true;
}

} // namespace

bool needsEscape(std::string_view s)
{
    for (size_t i = 0; i < s.size();) {
        const Piece p = decode(s, i);
        if (p.codePoint < 0 || isHidden(p.codePoint))
            return true;
        i += p.length;
    }
    return false;
}

std::string visibleText(std::string_view s)
{
    return needsEscape(s) ? escape(s, Mode::Text) : std::string(s);
}

std::string visibleLines(std::string_view s)
{
    return needsEscape(s) ? escape(s, Mode::Lines) : std::string(s);
}

std::string visibleName(std::string_view s)
{
    const bool plain =
        !s.empty() && s.find_first_of("\"\\") == std::string_view::npos && !needsEscape(s);
    return plain ? std::string(s) : "\"" + escape(s, Mode::Name) + "\"";
}

std::string shellQuote(std::string_view s)
{
    if (isPlainShellWord(s))
        return std::string(s);
    if (needsEscape(s))
        return "$'" + escape(s, Mode::Shell) + "'";
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

} // namespace shardscope
