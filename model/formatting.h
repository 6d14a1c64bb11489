// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

#include <cstdint>
#include <span>
#include <string_view>

namespace shardscope {
struct TensorEntry;
}

namespace shardscope::model {

/** Text from a file for display (DisplayRole, tooltips): control, bidirectional and invisible
 *  characters shown as escapes, so a name is one line and reads as it is stored. Data roles keep
 *  the raw key. */
QString displayText(std::string_view s);
/** "1.50 MiB", "512 B": binary units, three significant digits. */
QString formatBytes(uint64_t bytes);
/** "[7168, 2048]"; "[]" for a scalar. */
QString formatShape(std::span<const int64_t> shape);
/** "1,234,567": digit groups, independent of the locale. */
QString formatCount(uint64_t n);
/** "1 file", "1,234 files": a count with the noun it takes (`one` and `many` untranslated
 *  English, translated in the "shardscope" context). */
QString countOf(uint64_t n, const char *one, const char *many);
/** torch's dtype name of a tensor entry ("bfloat16"), also when the dtype is not decoded. */
QString tensorDTypeName(const TensorEntry &t);
/** One line: "bfloat16  ·  [7168, 2048]  ·  14,680,064 elements  ·  28.0 MiB". */
QString describeTensor(const TensorEntry &t);
/** A double for the details panel: shortest form that round-trips, "nan", "inf". */
QString formatReal(double v);

} // namespace shardscope::model
