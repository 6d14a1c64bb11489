// SPDX-License-Identifier: MIT
#pragma once

#include <QRegularExpression>
#include <QString>

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

private:
    QString m_text;
    QRegularExpression m_glob; ///< valid only when m_text holds a wildcard
    bool m_isGlob = false;
};

} // namespace shardscope::model
