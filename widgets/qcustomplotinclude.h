// SPDX-License-Identifier: MIT
#pragma once

// qcustomplot.h uses Qt's keyword macros (signals, slots, emit) and foreach, which this project
// turns off (QT_NO_KEYWORDS, QT_NO_FOREACH; libtorch clashes with `slots`). Map them for this one
// header, then take them back. Include from .cpp files only, never from a header moc reads.
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
#define foreach(variable, container) for (variable : container)

#include <qcustomplot.h>

#undef signals
#undef slots
#undef emit
#undef foreach
