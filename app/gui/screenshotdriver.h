// SPDX-License-Identifier: MIT
#pragma once

#include <QObject>
#include <QString>

namespace shardscope::gui {

class MainWindow;

/**
 * Screenshot mode (documentation and tests): once the checkpoint is open, select the initial key
 * or the first tensor, wait for its details, save the window to a PNG and quit (exit code 0,
 * 1 when the checkpoint cannot be opened or the file written, 2 on time-out).
 */
class ScreenshotDriver : public QObject
{
    Q_OBJECT

public:
    ScreenshotDriver(MainWindow *window, const QString &file);

private:
    void onOpened();
    void onDetails(const QString &key);
    void take();

    MainWindow *m_window;
    QString m_file;
    bool m_pending = true;
    bool m_waitingForDiff = false;
};

} // namespace shardscope::gui
