// SPDX-License-Identifier: MIT
#include "keymatcher.h"

#include <fnmatch.h>

namespace shardscope::model {

bool KeyMatcher::setText(const QString &text)
{
    const QString t = text.trimmed();
    if (t == m_text)
        return false;
    m_text = t;
    m_isGlob = t.contains(QLatin1Char('*')) || t.contains(QLatin1Char('?')) ||
               t.contains(QLatin1Char('['));
    if (m_isGlob) {
        m_glob = QRegularExpression::fromWildcard(t, Qt::CaseInsensitive,
                                                  QRegularExpression::UnanchoredWildcardConversion);
        m_glob.optimize();
    }
    m_lower = t.toUtf8().toLower().toStdString();
    m_fnmatch = "*" + t.toUtf8().toStdString() + "*";
    return true;
}

bool KeyMatcher::matches(const QString &key) const
{
    if (m_text.isEmpty())
        return true;
    return m_isGlob ? m_glob.match(key).hasMatch() : key.contains(m_text, Qt::CaseInsensitive);
}

bool KeyMatcher::matches(std::string_view key) const
{
    if (m_text.isEmpty())
        return true;
    if (m_isGlob)
        return fnmatch(m_fnmatch.c_str(), std::string(key).c_str(), FNM_CASEFOLD) == 0;
    const size_t m = m_lower.size();
    if (m > key.size())
        return false;
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    const char first = m_lower[0];
    for (size_t i = 0; i + m <= key.size(); ++i) {
        if (lower(key[i]) != first)
            continue;
        size_t j = 1;
        while (j < m && lower(key[i + j]) == m_lower[j])
            ++j;
        if (j == m)
            return true;
    }
    return false;
}

} // namespace shardscope::model
