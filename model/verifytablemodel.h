// SPDX-License-Identifier: MIT
#pragma once

#include "loadmarks.h"
#include "snapshots.h"

#include "flattablemodel.h"

#include <unordered_map>

namespace shardscope::model {

/**
 * A verification's parameters, one row each, worst outcome first: outcome, mismatching elements
 * with the first one's index, whether the save path's re-split gives the stored bytes back,
 * the ranks that hold a shard, the fingerprint and the statistics of the loaded values.
 * LoadMarkRole carries the row's mark (as the tree shows it), NameRole the parameter's name,
 * SourceKeyRole its first stored key (the tree's row for it); SortRole sorts numbers as numbers.
 * A parameter kept at its initial values shows no statistics: what the verification gathered
 * for it is its own marker fill. A loaded parameter's note is a remark ("note: looks freshly
 * initialised …"), NoteIsProblemRole false, never worded or marked as a problem.
 */
class VerifyTableModel : public FlatTableModel
{
    Q_OBJECT

public:
    enum Column : int {
        NameColumn,
        OutcomeColumn,
        MismatchColumn,
        RoundTripColumn,
        RanksColumn,
        FingerprintColumn,
        MeanColumn,
        StdColumn,
        MinColumn,
        MaxColumn,
        NoteColumn,
        ColumnCount,
    };
    enum Role : int {
        LoadMarkRole = Qt::UserRole + 200, ///< int: a LoadMark
        NameRole,                          ///< QString: the parameter
        SourceKeyRole, ///< QString: the first stored key it draws from (with a diff), else the
                       ///< first that holds its data unread (kept at its initial values)
        SortRole,
        NoteIsProblemRole, ///< bool: the note says what is wrong (else it is a remark)
    };

    explicit VerifyTableModel(QObject *parent = nullptr);

    /** Replaces the contents (model reset); the diff names each parameter's stored keys. */
    void setReport(VerifySnapshot report, DiffSnapshot diff = nullptr);
    const VerifySnapshot &report() const { return m_report; }
    /** The row of a parameter; -1 when it has none. */
    int rowOf(const QString &name) const;

private:
    int rows() const override;
    QVariant cellData(const QModelIndex &index, int role) const override;

    VerifySnapshot m_report;
    DiffSnapshot m_diff;
    std::vector<uint32_t> m_order; ///< rows → params, worst first
    std::vector<LoadMark> m_marks; ///< per param
    std::unordered_map<std::string_view, std::string_view> m_sourceKey;
};

} // namespace shardscope::model
