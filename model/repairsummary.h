// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

namespace shardscope {
struct FixResult;
}

namespace shardscope::model {

/** What a repair wrote, per kind of change, whether the load now fills everything, and the
 *  commands that check it: one paragraph for the window. */
QString repairSummaryText(const FixResult &fix);

/** Why nothing was written: how many entries references cannot repair, and the first ones. */
QString repairBlockedText(const FixResult &fix);

} // namespace shardscope::model
