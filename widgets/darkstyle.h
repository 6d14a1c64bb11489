// SPDX-License-Identifier: MIT
#pragma once

#include <QPalette>

class QStyle;

namespace shardscope::widgets {

/** The dark palette `shardscope --dark` sets (what a dark desktop gives, for checking the
 *  colours): every role a style draws with, so that nothing is left at a light default. */
QPalette darkPalette();

/**
 * Fusion as `--dark` uses it: an unchecked check box or radio button is outlined in a colour
 * that reads on a dark window (Fusion outlines it a shade darker than the window: near black on
 * dark grey, invisible).
 */
QStyle *createDarkStyle();

} // namespace shardscope::widgets
