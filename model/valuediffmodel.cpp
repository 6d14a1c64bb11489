// SPDX-License-Identifier: MIT
#include "valuediffmodel.h"

#include "formatting.h"

#include <algorithm>

namespace shardscope::model {

namespace {

using Verdict = TensorValueDiff::Verdict;

int rank(Verdict v)
{
    switch (v) {
    case Verdict::NotCompared:
        return 0;
    case Verdict::Different:
        return 1;
    case Verdict::Within:
        return 2;
    case Verdict::Identical:
        return 3;
    }
    return 3;
}

QString number(double v)
{
    return QString::number(v, 'g', 4);
}

QString indexText(const std::vector<int64_t> &at)
{
    QStringList parts;
    for (int64_t i : at)
        parts.push_back(QString::number(i));
    return QStringLiteral("[%1]").arg(parts.join(QStringLiteral(", ")));
}

} // namespace

QString valueTensorName(const TensorValueDiff &t)
{
    // Optimizer state's names already end in ".<state>" (docs/value-diff.md).
    return QString::fromStdString(t.name);
}

ValueDiffModel::ValueDiffModel(QObject *parent)
    : FlatTableModel({tr("Tensor"), tr("Verdict"), tr("Differing"), tr("Max |a−b|"), tr("Max rel"),
                      tr("Rel. L2"), tr("Cosine"), tr("Max ULP"), tr("First difference"),
                      tr("DType")},
                     parent)
{}

void ValueDiffModel::setValues(ValuesSnapshot values)
{
    beginResetModel();
    m_values = std::move(values);
    m_order.clear();
    if (m_values) {
        const auto &t = m_values->tensors;
        m_order.resize(t.size());
        for (uint32_t i = 0; i < m_order.size(); ++i)
            m_order[i] = i;
        std::stable_sort(m_order.begin(), m_order.end(), [&t](uint32_t a, uint32_t b) {
            const int ra = rank(t[a].verdict), rb = rank(t[b].verdict);
            if (ra != rb)
                return ra < rb;
            return t[a].relL2 > t[b].relL2;
        });
    }
    endResetModel();
}

int ValueDiffModel::rowOfTensor(int tensor) const
{
    const auto it = std::find(m_order.begin(), m_order.end(), uint32_t(tensor));
    return it == m_order.end() ? -1 : int(it - m_order.begin());
}

int ValueDiffModel::rows() const
{
    return int(m_order.size());
}

QVariant ValueDiffModel::cellData(const QModelIndex &index, int role) const
{
    const uint32_t at = m_order[size_t(index.row())];
    const TensorValueDiff &t = m_values->tensors[at];
    const bool compared = t.verdict != Verdict::NotCompared;
    switch (role) {
    case VerdictRole:
        return QString::fromUtf8(verdictName(t.verdict));
    case DifferentRole:
        return t.verdict == Verdict::Different;
    case TensorRole:
        return int(at);
    case StoredKeyRole:
        return t.keysA.empty() ? QString() : QString::fromStdString(t.keysA.front());
    case Qt::ToolTipRole:
        if (index.column() == VerdictColumn && !t.why.empty())
            return QString::fromStdString(t.why);
        if (index.column() == NameColumn) {
            QStringList keys;
            for (const std::string &k : t.keysA)
                keys.push_back(QString::fromStdString(k));
            QStringList keysB;
            for (const std::string &k : t.keysB)
                keysB.push_back(QString::fromStdString(k));
            return tr("first: %1\nsecond: %2")
                .arg(keys.join(QStringLiteral(", ")), keysB.join(QStringLiteral(", ")));
        }
        return {};
    case Qt::TextAlignmentRole:
        if (index.column() >= DifferingColumn && index.column() <= UlpColumn)
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        return {};
    case SortRole:
        switch (index.column()) {
        case VerdictColumn:
            return rank(t.verdict);
        case DifferingColumn:
            return qlonglong(t.differing);
        case MaxAbsColumn:
            return t.maxAbs;
        case MaxRelColumn:
            return t.maxRel;
        case RelL2Column:
            return t.relL2;
        case CosineColumn:
            return t.cosine;
        case UlpColumn:
            return qlonglong(t.maxUlp);
        default:
            return data(index, Qt::DisplayRole);
        }
    case Qt::DisplayRole:
        switch (index.column()) {
        case NameColumn:
            return valueTensorName(t);
        case VerdictColumn:
            return compared
                       ? QString::fromUtf8(verdictName(t.verdict))
                       : QStringLiteral("%1: %2").arg(QString::fromUtf8(verdictName(t.verdict)),
                                                      QString::fromStdString(t.why));
        case DifferingColumn:
            return compared ? tr("%1 of %2")
                                  .arg(formatCount(uint64_t(t.differing)),
                                       formatCount(uint64_t(t.count)))
                            : QString();
        case MaxAbsColumn:
            return compared ? number(t.maxAbs) : QString();
        case MaxRelColumn:
            return compared ? number(t.maxRel) : QString();
        case RelL2Column:
            return compared ? number(t.relL2) : QString();
        case CosineColumn:
            return compared ? QString::number(t.cosine, 'f', 6) : QString();
        case UlpColumn:
            return t.maxUlp >= 0 ? QString::number(t.maxUlp) : QString();
        case FirstDiffColumn:
            return t.firstDiff.empty() ? QString() : indexText(t.firstDiff);
        case DTypeColumn:
            return t.dtypeA == t.dtypeB
                       ? QString::fromStdString(t.dtypeA)
                       : QStringLiteral("%1 / %2").arg(QString::fromStdString(t.dtypeA),
                                                       QString::fromStdString(t.dtypeB));
        default:
            return {};
        }
    default:
        return {};
    }
}

} // namespace shardscope::model
