// SPDX-License-Identifier: MIT
#pragma once

#include <QRegularExpression>
#include <QString>

#include <string>
#include <string_view>

namespace shardscope::model {

/**
 * The filter text's test of a full key, the same for the tree and the problems list: a
 * case-insensitive substring, or a glob (`*`, `?`, `[...]`) matched anywhere in the key.
 */
class KeyMatcher
{
public:
    /** False when the text is unchanged. */
    bool setText(const QString &text);
    QString text() const { return m_text; }
    bool isEmpty() const { return m_text.isEmpty(); }
    bool matches(const QString &key) const;
    /** The same test of a UTF-8 key (ASCII letters fold case), without a QString. */
    bool matches(std::string_view key) const;

private:
    QString m_text;
    QRegularExpression m_glob; ///< valid only when m_text holds a wildcard
    bool m_isGlob = false;
    std::string m_lower;   ///< the text, UTF-8, ASCII lower case
    std::string m_fnmatch; ///< a glob as fnmatch() takes it, unanchored: "*text*"
};

} // namespace shardscope::model
