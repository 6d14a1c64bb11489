// SPDX-License-Identifier: MIT
#include "keymatcher.h"

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
    return true;
}

bool KeyMatcher::matches(const QString &key) const
{
    if (m_text.isEmpty())
        return true;
    return m_isGlob ? m_glob.match(key).hasMatch() : key.contains(m_text, Qt::CaseInsensitive);
}

} // namespace shardscope::model
