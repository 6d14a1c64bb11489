// SPDX-License-Identifier: MIT
#include "formatting.h"

#include <QCoreApplication>

#include <shardscope/checkpoint.h>
#include <shardscope/escape.h>

#include <QStringList>

#include <algorithm>

#include <cmath>

namespace shardscope::model {

QString displayText(std::string_view s)
{
    if (!needsEscape(s))
        return QString::fromUtf8(s.data(), qsizetype(s.size()));
    return QString::fromStdString(visibleText(s));
}

QString formatBytes(uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024)
        return QString::number(bytes) + QLatin1String(" B");
    double v = double(bytes);
    int unit = 0;
    while (v >= 1024.0 && unit < 6) {
        v /= 1024.0;
        ++unit;
    }
    const int decimals = v < 10 ? 2 : v < 100 ? 1 : 0;
    return QString::number(v, 'f', decimals) + QLatin1Char(' ') + QLatin1String(units[unit]);
}

QString formatShape(std::span<const int64_t> shape)
{
    QString s = QStringLiteral("[");
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i)
            s += QLatin1String(", ");
        s += QString::number(shape[i]);
    }
    return s + QLatin1Char(']');
}

QString formatCount(uint64_t n)
{
    QString digits = QString::number(n);
    for (qsizetype i = digits.size() - 3; i > 0; i -= 3)
        digits.insert(i, QLatin1Char(','));
    return digits;
}

QString countOf(uint64_t n, const char *one, const char *many)
{
    return QStringLiteral("%1 %2").arg(
        formatCount(n), QCoreApplication::translate("shardscope", n == 1 ? one : many));
}

QString tensorDTypeName(const TensorEntry &t)
{
    return displayText(t.dtypeName.empty() ? std::string(dtypeName(t.dtype)) : t.dtypeName);
}

QString describeTensor(const TensorEntry &t)
{
    const uint64_t numel = uint64_t(std::max<int64_t>(t.numel(), 0));
    return QStringLiteral("%1  ·  %2  ·  %3 elements  ·  %4")
        .arg(tensorDTypeName(t), formatShape(t.shape), formatCount(numel), formatBytes(t.nbytes()));
}

QString formatReal(double v)
{
    if (std::isnan(v))
        return QStringLiteral("nan");
    if (std::isinf(v))
        return v > 0 ? QStringLiteral("inf") : QStringLiteral("-inf");
    return QString::number(v, 'g', 8);
}

} // namespace shardscope::model
