// SPDX-License-Identifier: MIT
#pragma once

#include <QWidget>

class QLabel;
class QSortFilterProxyModel;
class QTreeView;

namespace shardscope::model {
class ProblemListModel;
}

namespace shardscope::widgets {

/** Every problem, the load's and the reading's, as a sortable list (ProblemListModel);
 *  activating one names the key the tree shows for it. */
class ProblemsPanel : public QWidget
{
    Q_OBJECT

public:
    explicit ProblemsPanel(QWidget *parent = nullptr);

    /** Shows `model` (not owned). */
    void setModel(model::ProblemListModel *model);
    QTreeView *view() const { return m_view; }

Q_SIGNALS:
    /** A problem was activated (double-click, Enter); `key` may be empty. */
    void problemActivated(const QString &key);

protected:
    void showEvent(QShowEvent *event) override;
    void hideEvent(QHideEvent *event) override;

private:
    void updateTitle();

    QLabel *m_title = nullptr;
    QTreeView *m_view = nullptr;
    QSortFilterProxyModel *m_proxy = nullptr;
    model::ProblemListModel *m_model = nullptr;
};

} // namespace shardscope::widgets
