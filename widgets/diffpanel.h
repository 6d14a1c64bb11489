// SPDX-License-Identifier: MIT
#pragma once

#include "model/snapshots.h"

#include <QWidget>

class QComboBox;
class QCheckBox;
class QLabel;
class QTextBrowser;
class QToolButton;
class QTreeView;

namespace shardscope::model {
class DiffFilterProxy;
class DiffListModel;
} // namespace shardscope::model

namespace shardscope::widgets {

/**
 * The load diff beside the tree: a banner with what the real load does (quoted, and how many
 * parameters it silently keeps at their initial values, in the strongest colour), the entries
 * with their status in colour and with an icon, a status filter, the rules as checkable items
 * and the strictness as a selector (each change asks for the diff again), F8 / Shift+F8 to the
 * next / previous problem (gotoProblem()), and the selected entry's stored keys, reason and fix.
 */
class DiffPanel : public QWidget
{
    Q_OBJECT

public:
    explicit DiffPanel(QWidget *parent = nullptr);

    void setDiff(const model::DiffSnapshot &diff);
    /** What the checkpoint is checked against, in words ("the layout of config.json"), said
     *  in the banner with the options the diff ran with. */
    void setAgainst(const QString &what);
    /** The options the controls say: rules switched off, strictness, partial load. */
    shardscope::DiffOptions options() const;
    /** Sets the controls (no optionsChanged). */
    void setOptions(const shardscope::DiffOptions &options);
    /** Selects the next (or previous) problem row after the current one; false at the end. */
    bool gotoProblem(bool forward);
    model::DiffListModel *listModel() const { return m_model; }
    /** The selected entry's fix; empty when none is selected or it has none. */
    QString currentFix() const;

public Q_SLOTS:
    void setFilterText(const QString &text);

Q_SIGNALS:
    /** The controls changed: the caller runs the diff again with these options. */
    void optionsChanged(const shardscope::DiffOptions &options);
    /** A parameter or key was selected; `storedKey`: the first stored key it draws from. */
    void entrySelected(const QString &name, const QString &storedKey);

private:
    /** The entry at `proxyIndex` in the details pane, under `caption` if any. */
    void showDetails(const QModelIndex &proxyIndex, const QString &caption = {});
    void updateBanner();

    QString m_against;
    model::DiffListModel *m_model;
    model::DiffFilterProxy *m_proxy;
    QLabel *m_banner;
    QComboBox *m_status;
    QToolButton *m_rules;
    QComboBox *m_strictness;
    QCheckBox *m_partial;
    QTreeView *m_view;
    QTextBrowser *m_details;
};

} // namespace shardscope::widgets
