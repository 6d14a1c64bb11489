// SPDX-License-Identifier: MIT
#pragma once

class QAbstractItemView;

namespace shardscope::widgets {

/**
 * The view's item tooltips are shown as plain text. Qt guesses rich text from a tooltip's first
 * characters, so a key from a file that begins like markup ("<img src=…>") would be rendered;
 * here the text is always escaped first.
 */
void installPlainToolTips(QAbstractItemView *view);

} // namespace shardscope::widgets
