// SPDX-License-Identifier: MIT
#include "screenshotdriver.h"

#include "mainwindow.h"

#include "model/checkpointsession.h"
#include "model/layerfamily.h"

#include <QApplication>
#include <QTimer>

#include <cstdio>
#include <utility>

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
    connect(session, &CheckpointSession::openFailed, this,
            [](const QString &, const QString &error) {
                std::fprintf(stderr, "shardscope: %s\n", qPrintable(error));
                QApplication::exit(1);
            });
    connect(session, &CheckpointSession::compareOpened, this, [this] {
        if (m_values)
            QTimer::singleShot(250, this, &ScreenshotDriver::take);
    });
    connect(session, &CheckpointSession::tensorDetailsReady, this,
            [this](const TensorDetails &details) { onDetails(details.key); });
    connect(session, &CheckpointSession::objectReady, this,
            [this](const ObjectDetails &details) { onDetails(details.key); });
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
    // With a layout or config, the picture shows its diff: wait for it; then for the
    // verification and the value comparison when asked for.
    CheckpointSession *session = m_window->session();
    if (!m_waitingForDiff) {
        m_waitingForDiff = true;
        auto again = [this] { QTimer::singleShot(250, this, &ScreenshotDriver::take); };
        connect(session, &CheckpointSession::diffChanged, this, [again](const DiffSnapshot &d) {
            if (d)
                again();
        });
        connect(session, &CheckpointSession::verificationChanged, this,
                [again](const VerifySnapshot &v) {
                    if (v)
                        again();
                });
        connect(session, &CheckpointSession::valuesChanged, this, [again](const ValuesSnapshot &v) {
            if (v)
                again();
        });
        connect(session, &CheckpointSession::layerStatsChanged, this,
                [this, again](const LayerStatsSnapshot &stats) {
                    m_layersDone = stats != nullptr;
                    again();
                });
        connect(session, &CheckpointSession::jobEnded, this,
                [this](const JobInfo &, bool ok, const QString &message) {
                    // A job superseded by the next one is cancelled, not failed: start again what
                    // is still missing.
                    if (!ok && message == jobCancelledText()) {
                        m_verifyStarted = m_valuesStarted = m_layersStarted = false;
                        QTimer::singleShot(250, this, &ScreenshotDriver::take);
                        return;
                    }
                    if (!ok) {
                        std::fprintf(stderr, "shardscope: %s\n", qPrintable(message));
                        QApplication::exit(1);
                    }
                });
    }
    if (m_window->expectsDiff() && !session->diff())
        return;
    if (m_verify && !session->verification()) {
        if (!std::exchange(m_verifyStarted, true))
            m_window->verifyLoad();
        return;
    }
    if (m_values && !session->values()) {
        if (!session->compareIndex())
            return; // compareOpened brings us back
        if (!std::exchange(m_valuesStarted, true))
            m_window->compareValues();
        return;
    }
    if (m_layers && !m_layersDone) {
        if (layerKey(m_window->detailsKey()).family.isEmpty()) {
            std::fprintf(stderr, "shardscope: --plot-layers: select a tensor of a layer\n");
            QApplication::exit(1);
            return;
        }
        if (!std::exchange(m_layersStarted, true))
            m_window->plotLayers();
        return;
    }
    // A step may have selected another entry (the compare panel selects the worst tensor):
    // its details come back through onDetails().
    if (m_window->detailsPending())
        return;
    m_pending = false;
    const bool saved = m_window->grab().save(m_file, "PNG");
    if (!saved)
        std::fprintf(stderr, "shardscope: cannot write %s\n", qPrintable(m_file));
    QApplication::exit(saved ? 0 : 1);
}

} // namespace shardscope::gui
