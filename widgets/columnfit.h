// SPDX-License-Identifier: MIT
#pragma once

class QTreeView;

namespace shardscope::widgets {

/**
 * Sizes `view`'s columns to what they show (a sample of rows, so that a long table costs the
 * same as a short one), none wider than `maxShare` of the view, the last one taking what is
 * left; again each time its model is reset. Call after setModel().
 */
void fitColumnsToContents(QTreeView *view, double maxShare = 0.45);

} // namespace shardscope::widgets
