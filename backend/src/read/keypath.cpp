// SPDX-License-Identifier: MIT
#include "shardscope/checkpoint.h"

#include <cstring>

namespace shardscope {

KeyPath KeyPath::fromParts(std::string_view key, const std::vector<std::string> &parts)
{
    std::vector<std::string_view> views(parts.begin(), parts.end());
    return fromParts(key, views);
}

KeyPath KeyPath::fromParts(std::string_view key, std::span<const std::string_view> parts)
{
    KeyPath p;
    if (parts.empty())
        return p;
    // Which dots of the key the components' joins fall on; any mismatch keeps the strings.
    uint64_t dots = 0;
    size_t pos = 0, dot = 0; // position in key; index of the next dot of key
    bool ok = true;
    for (size_t i = 0; ok && i < parts.size(); ++i) {
        const std::string_view part = parts[i];
        if (key.substr(pos, part.size()) != part) {
            ok = false;
            break;
        }
        // Dots inside a component (memchr: a million keys' components go through here).
        size_t inside = 0;
        for (const char *c = part.data(), *end = c + part.size();
             (c = static_cast<const char *>(std::memchr(c, '.', size_t(end - c)))); ++c)
            ++inside;
        if (inside && dot + inside > 64) // dots past 63 always separate
            ok = false;
        dot += inside;
        pos += part.size();
        if (i + 1 == parts.size())
            break;
        if (pos >= key.size() || key[pos] != '.') {
            ok = false;
            break;
        }
        if (dot < 64)
            dots |= uint64_t(1) << dot;
        ++dot;
        ++pos;
    }
    if (ok && pos == key.size()) {
        for (; dot < 64; ++dot) // bits past the key's last dot: set, so that the default compares
            dots |= uint64_t(1) << dot;
        p.m_dots = dots;
    } else {
        p.m_explicit.assign(parts.begin(), parts.end());
    }
    return p;
}

void KeyPath::partsInto(std::string_view key, std::vector<std::string_view> &out) const
{
    out.clear();
    if (!m_explicit.empty()) {
        out.assign(m_explicit.begin(), m_explicit.end());
        return;
    }
    size_t start = 0, dot = 0;
    for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] != '.')
            continue;
        if (dot >= 64 || (m_dots >> dot & 1)) {
            out.push_back(key.substr(start, i - start));
            start = i + 1;
        }
        ++dot;
    }
    out.push_back(key.substr(start));
}

std::vector<std::string> KeyPath::parts(std::string_view key) const
{
    std::vector<std::string_view> views;
    partsInto(key, views);
    return {views.begin(), views.end()};
}

} // namespace shardscope
