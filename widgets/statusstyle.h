// SPDX-License-Identifier: MIT
#pragma once

#include "model/loadmarks.h"

#include <QColor>
#include <QList>

class QStyleOptionViewItem;
class QPalette;
class QProgressBar;
class QWidget;

namespace shardscope::widgets {

/** How loudly a cell asks for attention. Every level has an icon: never colour alone. */
enum class Attention { Fine, Warning, Bad, Worst };

Attention attentionFor(model::LoadMark mark);

/** The text colour of a level, readable on the palette's base (light or dark). */
QColor attentionColor(Attention level, const QPalette &palette);

/**
 * Sets the cell's icon and text colour for `level`; Worst (kept at init: a load that raises
 * nothing) is bold too. Fine shows a check mark only when `markFine`.
 */
void applyAttention(QStyleOptionViewItem *option, Attention level, bool markFine = true);

/** A job's progress on a bar (permille < 0: busy, amount unknown), and its stage with the
 *  time left (etaSeconds < 0: no estimate yet) as one line. */
QString showJobProgress(QProgressBar *bar, const QString &stage, int permille, double etaSeconds);

/** "about 12 s left", "about 4 min left", "about 1.5 h left". */
QString timeLeftText(double seconds);

/** A legend of the levels as the views show them (icon, colour, what each means). */
QWidget *attentionLegend(QWidget *parent);
/** The legend's entries, one widget each, for a layout that wraps them. */
QList<QWidget *> attentionLegendItems(QWidget *parent);

} // namespace shardscope::widgets
