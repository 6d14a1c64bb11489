// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

namespace shardscope {
struct PyValue;
}

namespace shardscope::model {

/**
 * A Python-like, indented rendering of a decoded value for the details panel. Short containers
 * stay on one line; long ones are split one item per line. Output is bounded by `maxLines`
 * (the rest is elided with a note), so huge payloads cannot stall the GUI.
 */
QString formatPyValue(const PyValue &value, int maxLines = 2000);

} // namespace shardscope::model
