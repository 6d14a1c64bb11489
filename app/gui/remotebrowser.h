// SPDX-License-Identifier: MIT
// A directory browser of the remote host, for where the window asks for a path there (File ▸
// Open Remote…'s checkpoint, File ▸ Open in a remote window): the server lists a directory
// (names, kinds and sizes; it opens no file), Up goes to its parent, a double-click enters a
// directory, and entries that look like checkpoints are marked.
#pragma once

#include <shardscope/remote.h>

#include <QDialog>

#include <memory>

class QLabel;
class QLineEdit;
class QPushButton;
class QTreeWidget;
class QTreeWidgetItem;

namespace shardscope::model {
class RemoteBackend;
} // namespace shardscope::model

namespace shardscope::gui {

class RemoteBrowser : public QDialog
{
    Q_OBJECT

public:
    /** Lists `start` ("" or "~": the remote home) through `session`, named `host` in titles. */
    RemoteBrowser(std::shared_ptr<RemoteSession> session, const QString &host, const QString &start,
                  QWidget *parent = nullptr);
    ~RemoteBrowser() override;

    /** The directory listed (absolute, as the server resolved it). */
    QString directory() const { return m_directory; }
    /** What Open chose: the selected entry, or the listed directory when none is. */
    QString chosenPath() const { return m_chosen; }
    /** The listing's rows (tests). */
    QTreeWidget *list() const { return m_list; }
    bool listing() const { return m_pending; }

public Q_SLOTS:
    /** Lists `path` (a listing still under way is left to end unseen). */
    void showDirectory(const QString &path);
    void up();

Q_SIGNALS:
    /** A listing arrived (or failed: its message is in the status line). */
    void listed();

private:
    void received(int generation, const Result<RemoteListing> &listing);
    void activated(QTreeWidgetItem *item);
    void choose();
    QString pathOf(const QTreeWidgetItem *item) const;

    std::shared_ptr<RemoteSession> m_session;
    QLineEdit *m_path;
    QPushButton *m_up, *m_open;
    QTreeWidget *m_list;
    QLabel *m_status;
    QString m_directory, m_chosen, m_requested;
    CancelToken m_cancel;
    int m_generation = 0;
    bool m_pending = false;
    bool m_triedParent = false;
};

/** A path on `remote`'s host chosen in a RemoteBrowser over `parent`; empty when cancelled. */
QString browseRemote(QWidget *parent, const std::shared_ptr<model::RemoteBackend> &remote,
                     const QString &start);

} // namespace shardscope::gui
