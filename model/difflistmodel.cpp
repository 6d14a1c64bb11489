// SPDX-License-Identifier: MIT
#include "difflistmodel.h"

#include "diffchoices.h"
#include "formatting.h"

#include <algorithm>

namespace shardscope::model {

namespace {

QString text(std::string_view s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

QString sourcesText(const DiffEntry &e)
{
    QStringList parts;
    for (const DiffSource &s : e.sources) {
        QString p = QString::fromStdString(s.key);
        if (!s.index.empty()) {
            QStringList at;
            for (int64_t i : s.index)
                at.push_back(QString::number(i));
            p += QStringLiteral("[%1]").arg(at.join(QStringLiteral(", ")));
        }
        if (s.end > s.begin)
            p += QStringLiteral(" → rows %1–%2").arg(s.begin).arg(s.end);
        parts.push_back(p);
    }
    return parts.join(QStringLiteral("; "));
}

} // namespace

DiffListModel::DiffListModel(QObject *parent)
    : FlatTableModel(
          {tr("Parameter / key"), tr("Status"), tr("Real load"), tr("Stored as"), tr("Reason")},
          parent)
{}

void DiffListModel::setDiff(DiffSnapshot diff)
{
    resetContents([&] {
        m_diff = std::move(diff);
        m_keptAtInit.clear();
        if (m_diff)
            for (const std::string &k : m_diff->outcome.keptAtInit)
                m_keptAtInit.push_back(k);
        std::sort(m_keptAtInit.begin(), m_keptAtInit.end());
    });
}

int DiffListModel::nextProblemRow(int from) const
{
    if (!m_diff)
        return -1;
    for (size_t row = size_t(std::max(from, 0)); row < m_diff->entries.size(); ++row) {
        const DiffEntry &e = m_diff->entries[row];
        if (isLoadProblem(e) ||
            std::binary_search(m_keptAtInit.begin(), m_keptAtInit.end(), std::string_view(e.name)))
            return int(row);
    }
    return -1; // a stored key nothing reads is never one
}

int DiffListModel::rows() const
{
    return m_diff ? int(m_diff->entries.size() + m_diff->unconsumed.size()) : 0;
}

QVariant DiffListModel::cellData(const QModelIndex &index, int role) const
{
    const size_t row = size_t(index.row());
    if (row >= m_diff->entries.size()) { // a stored key nothing reads
        const UnconsumedKey &u = m_diff->unconsumed[row - m_diff->entries.size()];
        switch (role) {
        case Qt::DisplayRole:
        case Qt::ToolTipRole:
            switch (index.column()) {
            case NameColumn:
            case StoredColumn:
                return displayText(u.key);
            case StatusColumn:
                return tr("unconsumed");
            case LoadColumn:
                return tr("not read");
            case ReasonColumn:
                return displayText(u.note);
            default:
                return {};
            }
        case DiffStatusRole:
            return QStringLiteral("unconsumed");
        case FillsRole:
            return false;
        case ProblemRole:
            return false;
        case KeptAtInitRole:
            return false;
        case SourcesRole:
        case StoredKeyRole:
            return QString::fromStdString(u.key);
        default:
            return {};
        }
    }
    const DiffEntry &e = m_diff->entries[row];
    const bool kept =
        std::binary_search(m_keptAtInit.begin(), m_keptAtInit.end(), std::string_view(e.name));
    switch (role) {
    case Qt::DisplayRole:
    case Qt::ToolTipRole:
        switch (index.column()) {
        case NameColumn:
            return displayText(e.name);
        case StatusColumn:
            return text(statusName(e.status));
        case LoadColumn:
            return kept              ? tr("silently kept at initial values")
                   : e.wrongSource   ? tr("filled from the wrong key")
                   : e.realLoadFills ? tr("filled")
                                     : tr("not filled");
        case StoredColumn:
            return sourcesText(e);
        case ReasonColumn:
            return displayText(e.reason);
        default:
            return {};
        }
    case DiffStatusRole:
        return text(statusName(e.status));
    case FillsRole:
        return e.realLoadFills && !e.wrongSource;
    case ProblemRole: // as the reports and the CLI count them
        return isLoadProblem(e);
    case FixRole:
        return QString::fromStdString(e.fix);
    case SourcesRole:
        return sourcesText(e);
    case KeptAtInitRole:
        return kept;
    case StoredKeyRole: // the tree's row: what the load reads, else what holds its data unread
        return !e.sources.empty()      ? QString::fromStdString(e.sources.front().key)
               : !e.unreadKeys.empty() ? QString::fromStdString(e.unreadKeys.front())
                                       : QString();
    default:
        return {};
    }
}

} // namespace shardscope::model
