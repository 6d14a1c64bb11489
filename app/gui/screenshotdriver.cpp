// SPDX-License-Identifier: MIT
#include "screenshotdriver.h"

#include "mainwindow.h"

#include "model/checkpointsession.h"

#include <QApplication>
#include <QTimer>

#include <cstdio>

namespace shardscope::gui {

using namespace shardscope::model;

ScreenshotDriver::ScreenshotDriver(MainWindow *window, const QString &file)
    : QObject(window)
    , m_window(window)
    , m_file(file)
{
    window->setSelectFirstTensor(true);
    CheckpointSession *session = window->session();
    // Connected after the window's own handlers, so these run once it has selected.
    connect(session, &CheckpointSession::opened, this, &ScreenshotDriver::onOpened);
    connect(session, &CheckpointSession::openFailed, this, [](const QString &error) {
        std::fprintf(stderr, "shardscope: %s\n", qPrintable(error));
        QApplication::exit(1);
    });
    connect(session->runner(), &BackendRunner::tensorDetailsReady, this,
            [this](const QString &key) { onDetails(key); });
    connect(session->runner(), &BackendRunner::objectReady, this,
            [this](const QString &key) { onDetails(key); });
    QTimer::singleShot(120'000, this, [] {
        std::fprintf(stderr, "shardscope: timed out waiting for tensor details\n");
        QApplication::exit(2);
    });
}

void ScreenshotDriver::onOpened()
{
    if (m_window->detailsKey().isEmpty()) // nothing selected, or a group: nothing to wait for
        QTimer::singleShot(250, this, &ScreenshotDriver::take);
}

void ScreenshotDriver::onDetails(const QString &key)
{
    if (key == m_window->detailsKey())
        QTimer::singleShot(250, this, &ScreenshotDriver::take);
}

void ScreenshotDriver::take()
{
    if (!m_pending)
        return;
    // With a layout or config, the picture shows its diff: wait for it.
    if (m_window->expectsDiff() && !m_window->session()->diff()) {
        if (!m_waitingForDiff) {
            m_waitingForDiff = true;
            connect(m_window->session(), &CheckpointSession::diffChanged, this,
                    [this](const DiffSnapshot &diff) {
                        if (diff)
                            QTimer::singleShot(250, this, &ScreenshotDriver::take);
                    });
            connect(m_window->session(), &CheckpointSession::jobEnded, this,
                    [](bool ok, const QString &message) {
                        if (!ok) {
                            std::fprintf(stderr, "shardscope: %s\n", qPrintable(message));
                            QApplication::exit(1);
                        }
                    });
        }
        return;
    }
    m_pending = false;
    const bool saved = m_window->grab().save(m_file, "PNG");
    if (!saved)
        std::fprintf(stderr, "shardscope: cannot write %s\n", qPrintable(m_file));
    QApplication::exit(saved ? 0 : 1);
}

} // namespace shardscope::gui
