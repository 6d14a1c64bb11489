// SPDX-License-Identifier: MIT
// GoogleTest main for the model tests: a QCoreApplication (queued signals, QSignalSpy::wait)
// and the model's metatypes, then the tests.
#include "model/tensordetails.h"

#include <QCoreApplication>

#include <gtest/gtest.h>

int main(int argc, char **argv)
{
    QCoreApplication app(argc, argv);
    shardscope::model::registerMetaTypes();
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
