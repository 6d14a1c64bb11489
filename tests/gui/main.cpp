// SPDX-License-Identifier: MIT
// GoogleTest main for the widget tests: a QApplication on the offscreen platform, settings kept
// apart from the user's (QStandardPaths test mode), the model's metatypes.
#include "model/tensordetails.h"

#include <shardscope/remote.h>

#include <QApplication>
#include <QStandardPaths>

#include <gtest/gtest.h>

int main(int argc, char **argv)
{
    // ssh's SSH_ASKPASS while a test connects through a prompt: this binary, as the app is.
    if (auto code = shardscope::runAskpassHelper(argc, argv))
        return *code;
    QStandardPaths::setTestModeEnabled(true);
    // Headless by default (test discovery at build time runs this too).
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("ShardScopeTests"));
    QApplication::setApplicationName(QStringLiteral("shardscope_gui_tests"));
    shardscope::model::registerMetaTypes();
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
