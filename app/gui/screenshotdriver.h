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
    /** Verify the load once the diff is there, and wait for the verification. */
    void setVerify(bool on) { m_verify = on; }
    /** Compare values with the second checkpoint, and wait for the comparison. */
    void setValues(bool on) { m_values = on; }
    /** Plot the selected tensor's family across layers, and wait for it. */
    void setLayers(bool on) { m_layers = on; }

private:
    void onOpened();
    void onDetails(const QString &key);
    void take();

    MainWindow *m_window;
    QString m_file;
    bool m_pending = true;
    bool m_waitingForDiff = false;
    bool m_verify = false, m_verifyStarted = false;
    bool m_values = false, m_valuesStarted = false;
    bool m_layers = false, m_layersStarted = false, m_layersDone = false;
};

} // namespace shardscope::gui
