// SPDX-License-Identifier: MIT
#pragma once

#include <QStringView>

namespace shardscope::model {

/**
 * Compares names the way people number things: runs of digits compare by value ("layers.9" <
 * "layers.10", "weight2" < "weight10"), everything else case-insensitively, ties broken by
 * a plain comparison. Returns <0, 0 or >0. Needs no ICU (QCollator's numeric mode does).
 */
int naturalCompare(QStringView a, QStringView b);

} // namespace shardscope::model
