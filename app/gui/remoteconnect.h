// SPDX-License-Identifier: MIT
// Connecting the window to a checkpoint on another host: the connection made with a progress
// dialog that says what it waits for, ssh's prompts (a password, a 2FA code, a key's
// passphrase, a new host key) asked in a dialog, File ▸ Open Remote…'s dialog (host aliases
// from ~/.ssh/config, recent remote locations) and the window opened on it.
#pragma once

#include "model/checkpointsession.h"
#include "model/remotebackend.h"

#include <QDialog>
#include <QString>
#include <QStringList>

#include <memory>

class QComboBox;
class QLineEdit;
class QPushButton;
class QWidget;

namespace shardscope::gui {

/** Connects to `target`, showing what it waits for (Cancel stops it) and asking ssh's prompts
 *  in dialogs over `parent`; null and `error` set when it fails or is cancelled. */
std::shared_ptr<model::RemoteBackend> connectRemote(QWidget *parent, const RemoteTarget &target,
                                                    QString *error);

/** How the window's session connects to another host to compare with a checkpoint there
 *  (CheckpointSession::setRemoteConnector): ssh's prompts asked in dialogs over `parent`. */
model::CheckpointSession::RemoteConnector windowConnector(QWidget *parent);

/** The hosts named in ~/.ssh/config (its Host lines, wildcards left out). */
QStringList sshConfigHosts();

/** Recent remote locations, newest first: "host:/path" as the user named the host. */
QStringList recentRemoteLocations();
void addRecentRemoteLocation(const QString &host, const QString &path, const QString &server);
/** The server command last used with `host` (shardscope-cli when none). */
QString remoteServerFor(const QString &host);

/** How verify last ran on `host` (File ▸ Open Remote's hosts as named), kept in QSettings. */
RemoteLaunch remoteLaunchFor(const QString &host);
void setRemoteLaunchFor(const QString &host, const RemoteLaunch &launch);

/**
 * File ▸ Open Remote…: a host (recent ones first, then ~/.ssh/config's), the checkpoint there
 * (that host's recent paths) and the server command. Browse… connects first (the prompts in
 * dialogs, as Open's), lists directories there, and keeps the connection: Open then opens in
 * it instead of connecting again.
 */
class OpenRemoteDialog : public QDialog
{
    Q_OBJECT

public:
    /** `initial` ("host:/path") fills it in. */
    explicit OpenRemoteDialog(QWidget *parent = nullptr, const QString &initial = {});

    QString host() const;
    QString path() const;
    QString server() const;
    /** The connection Browse… made, while it is to host() with server() and up; else null. */
    std::shared_ptr<model::RemoteBackend> connection() const;

    QComboBox *hostBox() const { return m_host; }
    QComboBox *pathBox() const { return m_path; }
    QLineEdit *serverEdit() const { return m_server; }
    QPushButton *browseButton() const { return m_browse; }

public Q_SLOTS:
    /** Connects (unless connected) and browses the host; the chosen path fills the dialog. */
    void browse();

private:
    void fill(const QString &host);

    QComboBox *m_host, *m_path;
    QLineEdit *m_server;
    QPushButton *m_browse;
    std::shared_ptr<model::RemoteBackend> m_connection;
    QString m_connectedHost, m_connectedServer;
};

/** Asks for a host, path and server (OpenRemoteDialog), connects and opens the checkpoint in a
 *  new window; `initial` ("host:/path") fills the dialog in. */
void openRemoteDialog(QWidget *parent, const QString &initial = {});
/** Connects to `host` and opens `path` there in a new window (a recent remote location). */
void openRemoteWindow(QWidget *parent, const QString &host, const QString &path,
                      const QString &server);
/** Opens `path` in a new window over a connection already made to `host`. */
void openRemoteWindow(const std::shared_ptr<model::RemoteBackend> &backend, const QString &host,
                      const QString &path, const QString &server);

} // namespace shardscope::gui
