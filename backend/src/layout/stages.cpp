// SPDX-License-Identifier: MIT
// Decoder layers over pipeline stages as Megatron splits them, and the names a format gives
// them there (docs/formats.md §6.2; NVIDIA/Megatron-LM#7452 for Megatron-FSDP's local names).
#include "shardscope/layout.h"

#include <algorithm>
#include <string_view>

namespace shardscope {

int decoderLayerOf(const std::string &name)
{
    // Asked for every entry of a diff (650,000 at DeepSeek-V3 scale): parsed by hand.
    constexpr std::string_view prefix = "decoder.layers.";
    if (!name.starts_with(prefix))
        return -1;
    int layer = 0;
    size_t i = prefix.size();
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i - prefix.size() < 9; ++i)
        layer = layer * 10 + (name[i] - '0');
    return i > prefix.size() && i < name.size() && name[i] == '.' ? layer : -1;
}

Result<std::vector<int>> decoderStageEnds(const Layout &layout)
{
    int decoderLayers = 0;
    for (const LayoutParam &p : layout.params)
        decoderLayers = std::max(decoderLayers, decoderLayerOf(p.name) + 1);
    const int pp = std::max(1, layout.parallel.pp);
    std::vector<int> ends(size_t(pp), decoderLayers);
    if (pp == 1)
        return ends;
    // The first and last stages take the counts given, the stages between share the rest.
    const int first = layout.parallel.firstStageLayers, last = layout.parallel.lastStageLayers;
    const int even = pp - (first > 0) - (last > 0), rest = decoderLayers - first - last;
    auto s = [](int v) { return std::to_string(v); };
    if (rest < 0 || (even == 0 ? rest != 0 : rest % even != 0))
        return makeError(Error::Code::Unsupported,
                         s(decoderLayers) + " decoder layers do not split over pp " + s(pp) +
                             (first || last ? " with " + s(first) + " on the first stage and " +
                                                  s(last) + " on the last"
                                            : std::string(" evenly")));
    const int each = even ? rest / even : 0;
    int at = 0;
    for (int st = 0; st < pp; ++st) {
        at += st == 0 && first ? first : st == pp - 1 && last ? last : each;
        ends[size_t(st)] = at;
    }
    return ends;
}

bool stageLocalLayerNames(const Layout &layout, std::string_view format)
{
    auto it = layout.ppLayerNames.find(std::string(format));
    return it != layout.ppLayerNames.end() && it->second == "stage_local";
}

} // namespace shardscope
