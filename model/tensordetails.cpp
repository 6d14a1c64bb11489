// SPDX-License-Identifier: MIT
#include "tensordetails.h"

#include <utility>

namespace shardscope::model {

void setHistogram(TensorDetails &details)
{
    const TensorHealth &h = details.stats;
    details.histogram.assign(h.histogram.begin(), h.histogram.end());
    details.histogramMin = h.min;
    details.histogramMax = h.max;
    if (!(h.max > h.min) && !details.histogram.empty()) {
        // One value: the kernels count it in the first bin of [v, v]; plot it centred in
        // [v - 0.5, v + 0.5].
        details.histogramMin = h.min - 0.5;
        details.histogramMax = h.max + 0.5;
        const size_t middle = details.histogram.size() / 2;
        std::swap(details.histogram[0], details.histogram[middle]);
    }
}

} // namespace shardscope::model
