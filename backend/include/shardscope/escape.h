// SPDX-License-Identifier: MIT
// Names from a checkpoint are hostile until shown otherwise: every place that prints one to a
// terminal, a report or a shell line goes through these. Control characters, C1 controls,
// invalid UTF-8 and the invisible or bidirectional format characters (which reorder or hide
// text: "Trojan Source") are made visible as escapes; nothing a terminal acts on gets through.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** One line of text no terminal acts on: \n, \r, \t, \x1b, \u202e and \xNN for bad bytes;
 *  everything else (backslashes and quotes included) as it is. For messages and prose. */
std::string visibleText(std::string_view s);

/** As visibleText(), but line breaks and tabs stay: for blocks of text (a loader's message). */
std::string visibleLines(std::string_view s);

/** A name printed alone (a key, a file name): unchanged when plain, otherwise quoted as git
 *  quotes paths ("a\x1bb", with \" and \\), so that no two names print alike. */
std::string visibleName(std::string_view s);

/** True when visibleText() would change `s`. */
bool needsEscape(std::string_view s);

/** One word for a POSIX shell: plain words as they are, '…' otherwise, and $'…' with escapes
 *  when it holds anything visibleText() escapes, so that a printed command is one safe line. */
std::string shellQuote(std::string_view s);

} // namespace shardscope
