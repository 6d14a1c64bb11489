// SPDX-License-Identifier: MIT
#include "layerfamily.h"

#include <QRegularExpression>

namespace shardscope::model {

LayerKey layerKey(const QString &key)
{
    static const QRegularExpression re(
        QStringLiteral("(^|\\.)(layers|layer|h|blocks)\\.(\\d+)(\\.|$)"));
    const QRegularExpressionMatch m = re.match(key);
    if (!m.hasMatch())
        return {};
    LayerKey out;
    out.layer = m.captured(3).toInt();
    out.family = key.left(m.capturedStart(3)) + QStringLiteral("{i}") + key.mid(m.capturedEnd(3));
    return out;
}

QString keyOfLayer(const QString &family, int layer)
{
    QString key = family;
    return key.replace(QStringLiteral("{i}"), QString::number(layer));
}

QString familyGlob(const QString &family)
{
    QString glob = family;
    // Glob characters in a key are matched as themselves.
    for (const QChar c : {QLatin1Char('['), QLatin1Char('?')})
        glob.replace(c, QStringLiteral("[%1]").arg(c));
    return glob.replace(QStringLiteral("{i}"), QStringLiteral("*"));
}

} // namespace shardscope::model
