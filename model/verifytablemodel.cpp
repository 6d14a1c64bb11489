// SPDX-License-Identifier: MIT
#include "verifytablemodel.h"

#include "formatting.h"

#include <algorithm>

namespace shardscope::model {

namespace {

QString text(std::string_view s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

QString number(double v)
{
    return QString::number(v, 'g', 6);
}

QString keptStatsText()
{
    return VerifyTableModel::tr("No statistics: nothing stored reaches it (the verification "
                                "fills it with a marker, not data)");
}

// A problem's note says what is wrong; a loaded parameter's is a remark ("looks freshly
// initialised"), said as one so that it is not read as a problem.
QString noteText(const ParamCheck &p)
{
    QString note = displayText(p.note);
    if (p.outcome == ParamCheck::Outcome::KeptInitial)
        return note.isEmpty() ? keptStatsText()
                              : VerifyTableModel::tr("%1 (no statistics: the verification fills "
                                                     "it with a marker, not data)")
                                    .arg(note);
    if (!note.isEmpty() && (p.outcome == ParamCheck::Outcome::Identical ||
                            p.outcome == ParamCheck::Outcome::NotChecked))
        return VerifyTableModel::tr("note: %1").arg(note);
    return note;
}

} // namespace

VerifyTableModel::VerifyTableModel(QObject *parent)
    : FlatTableModel({tr("Parameter"), tr("Outcome"), tr("Mismatches"), tr("Round trip"),
                      tr("Ranks"), tr("Fingerprint"), tr("Mean"), tr("Std"), tr("Min"), tr("Max"),
                      tr("Note")},
                     parent)
{}

void VerifyTableModel::setReport(VerifySnapshot report, DiffSnapshot diff)
{
    beginResetModel();
    m_report = std::move(report);
    m_diff = std::move(diff);
    m_order.clear();
    m_marks.clear();
    m_sourceKey.clear();
    if (m_report) {
        const auto &params = m_report->result.params;
        m_marks.reserve(params.size());
        for (const ParamCheck &p : params)
            m_marks.push_back(verifyMark(p));
        m_order.resize(params.size());
        for (uint32_t i = 0; i < m_order.size(); ++i)
            m_order[i] = i;
        std::stable_sort(m_order.begin(), m_order.end(),
                         [this](uint32_t a, uint32_t b) { return m_marks[a] > m_marks[b]; });
    }
    // Where the tree shows it: the key the load reads, else the key that holds its data unread
    // (a parameter kept at its initial values).
    if (m_diff)
        for (const DiffEntry &e : m_diff->entries)
            if (e.section == Section::Model && (!e.sources.empty() || !e.unreadKeys.empty()))
                m_sourceKey.emplace(e.name, !e.sources.empty()
                                                ? std::string_view(e.sources.front().key)
                                                : std::string_view(e.unreadKeys.front()));
    endResetModel();
}

int VerifyTableModel::rowOf(const QString &name) const
{
    if (!m_report)
        return -1;
    const std::string n = name.toStdString();
    const auto &params = m_report->result.params;
    for (size_t row = 0; row < m_order.size(); ++row)
        if (params[m_order[row]].name == n)
            return int(row);
    return -1;
}

int VerifyTableModel::rows() const
{
    return int(m_order.size());
}

QVariant VerifyTableModel::cellData(const QModelIndex &index, int role) const
{
    const uint32_t at = m_order[size_t(index.row())];
    const ParamCheck &p = m_report->result.params[at];
    const bool mismatched = p.mismatches > 0;
    // Nothing of the checkpoint reaches a parameter kept at its initial values: what the
    // verification gathered for it is its marker fill, whose statistics say nothing.
    const bool kept = p.outcome == ParamCheck::Outcome::KeptInitial;
    const bool stats = p.health.count > 0 && !kept;
    switch (role) {
    case LoadMarkRole:
        return int(m_marks[at]);
    case NameRole:
        return QString::fromStdString(p.name);
    case NoteIsProblemRole:
        return m_marks[at] >= FirstAttentionMark;
    case SourceKeyRole: {
        auto it = m_sourceKey.find(p.name);
        return it == m_sourceKey.end() ? QString() : text(it->second);
    }
    case Qt::ToolTipRole:
        if (index.column() == NoteColumn || index.column() == OutcomeColumn)
            return p.note.empty() && !kept ? QVariant() : noteText(p);
        if (kept && index.column() >= MeanColumn && index.column() <= MaxColumn)
            return keptStatsText();
        if (index.column() == FingerprintColumn && !p.sha256.empty())
            return QStringLiteral("SHA-256 %1").arg(QString::fromStdString(p.sha256));
        return {};
    case Qt::TextAlignmentRole:
        if (index.column() >= MismatchColumn && index.column() != FingerprintColumn &&
            index.column() != NoteColumn && index.column() != RoundTripColumn)
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        return {};
    case SortRole:
        switch (index.column()) {
        case OutcomeColumn:
            return int(m_marks[at]);
        case MismatchColumn:
            return qulonglong(p.mismatches);
        case RanksColumn:
            return p.ranksHolding;
        case MeanColumn:
            return p.health.mean;
        case StdColumn:
            return p.health.std;
        case MinColumn:
            return p.health.min;
        case MaxColumn:
            return p.health.max;
        default:
            return data(index, Qt::DisplayRole);
        }
    case Qt::DisplayRole:
        switch (index.column()) {
        case NameColumn:
            return displayText(p.name);
        case OutcomeColumn:
            return text(outcomeName(p.outcome));
        case MismatchColumn:
            if (!mismatched)
                return p.outcome == ParamCheck::Outcome::Identical ? QStringLiteral("0")
                                                                   : QString();
            return tr("%1 (first at %2)").arg(formatCount(p.mismatches)).arg(p.firstMismatch);
        case RoundTripColumn:
            if (p.outcome == ParamCheck::Outcome::NotChecked ||
                p.outcome == ParamCheck::Outcome::Skipped)
                return {};
            return p.roundTrip ? tr("yes") : tr("no");
        case RanksColumn:
            return p.ranksHolding;
        case FingerprintColumn:
            return QString::fromStdString(p.fingerprint);
        case MeanColumn:
            return stats ? number(p.health.mean) : QString();
        case StdColumn:
            return stats ? number(p.health.std) : QString();
        case MinColumn:
            return stats ? number(p.health.min) : QString();
        case MaxColumn:
            return stats ? number(p.health.max) : QString();
        case NoteColumn:
            return noteText(p);
        default:
            return {};
        }
    default:
        return {};
    }
}

} // namespace shardscope::model
