// SPDX-License-Identifier: MIT
#pragma once

#include "snapshots.h"

#include <shardscope/checkpoint.h>
#include <shardscope/health.h>

#include <QMetaType>
#include <QString>

#include <cstdint>
#include <memory>
#include <vector>

namespace shardscope::model {

/** Bins of TensorDetails::histogram. */
inline constexpr int HistogramBins = 64;

/**
 * What the runner computed for one tensor: its health (the backend's kernels, the numbers
 * `inspect --stats` and `verify` print), content hash and a histogram to plot.
 */
struct TensorDetails
{
    QString key;
    /** Empty when the tensor was read; otherwise one line saying why not. */
    QString error;
    bool hasStats = false;
    shardscope::TensorHealth stats;
    QString statsError; ///< why there are no statistics (e.g. a dtype without them)
    QString sha256;     ///< of the contiguous little-endian bytes, lower-case hex
    /** Counts of finite values in HistogramBins equal bins over [histogramMin, histogramMax]
     *  (the health's bins; a tensor of one value is shown as one bar in the middle). */
    std::vector<uint64_t> histogram;
    double histogramMin = 0;
    double histogramMax = 0;
    qint64 elapsedMs = 0;

    bool ok() const { return error.isEmpty(); }
};

/** A non-tensor entry decoded by the runner. */
struct ObjectDetails
{
    QString key;
    QString error;   ///< empty when decoded
    QString summary; ///< one line ("argparse.Namespace(12 fields)")
    QString text;    ///< indented, Python-like rendering

    bool ok() const { return error.isEmpty(); }
};

/** Fills the plotted histogram of `details` from its health's bins. */
void setHistogram(TensorDetails &details);

} // namespace shardscope::model

Q_DECLARE_METATYPE(shardscope::model::TensorDetails)
Q_DECLARE_METATYPE(shardscope::model::ObjectDetails)
