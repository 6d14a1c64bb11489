// SPDX-License-Identifier: MIT
// Connecting the window to a checkpoint on another host: the connection made with a progress
// dialog that says what it waits for, ssh's prompts (a password, a 2FA code, a key's
// passphrase, a new host key) asked in a dialog, File ▸ Open Remote…'s dialog (host aliases
// from ~/.ssh/config, recent remote locations) and the window opened on it.
#pragma once

#include "model/remotebackend.h"

#include <QString>
#include <QStringList>

#include <memory>

class QWidget;

namespace shardscope::gui {

/** Connects to `target`, showing what it waits for (Cancel stops it) and asking ssh's prompts
 *  in dialogs over `parent`; null and `error` set when it fails or is cancelled. */
std::shared_ptr<model::RemoteBackend> connectRemote(QWidget *parent, const RemoteTarget &target,
                                                    QString *error);

/** The hosts named in ~/.ssh/config (its Host lines, wildcards left out). */
QStringList sshConfigHosts();

/** Recent remote locations, newest first: "host:/path" as the user named the host. */
QStringList recentRemoteLocations();
void addRecentRemoteLocation(const QString &host, const QString &path, const QString &server);
/** The server command last used with `host` (shardscope-cli when none). */
QString remoteServerFor(const QString &host);

/** Asks for a host, path and server (File ▸ Open Remote…), connects and opens the checkpoint
 *  in a new window; `initial` ("host:/path") fills the dialog in. */
void openRemoteDialog(QWidget *parent, const QString &initial = {});
/** Connects to `host` and opens `path` there in a new window (a recent remote location). */
void openRemoteWindow(QWidget *parent, const QString &host, const QString &path,
                      const QString &server);

} // namespace shardscope::gui
