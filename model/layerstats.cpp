// SPDX-License-Identifier: MIT
#include "layerstats.h"

#include <algorithm>
#include <cmath>

namespace shardscope::model {

QStringList layerStatisticNames()
{
    return {QStringLiteral("L2 norm"),  QStringLiteral("std"), QStringLiteral("mean"),
            QStringLiteral("max |x|"),  QStringLiteral("min"), QStringLiteral("max"),
            QStringLiteral("NaN + Inf")};
}

double layerStatistic(const TensorHealth &h, LayerStatistic s)
{
    switch (s) {
    case LayerStatistic::L2:
        return h.l2;
    case LayerStatistic::Std:
        return h.std;
    case LayerStatistic::Mean:
        return h.mean;
    case LayerStatistic::MaxAbs:
        return std::max(std::abs(h.min), std::abs(h.max));
    case LayerStatistic::Min:
        return h.min;
    case LayerStatistic::Max:
        return h.max;
    case LayerStatistic::NonFinite:
        return double(h.nanCount + h.posInfCount + h.negInfCount);
    }
    return 0;
}

} // namespace shardscope::model
