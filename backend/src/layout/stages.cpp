// SPDX-License-Identifier: MIT
// Decoder layers over pipeline stages as Megatron splits them, and the names a format gives
// them there (docs/formats.md §6.2; NVIDIA/Megatron-LM#7452 for Megatron-FSDP's local names).
#include "shardscope/layout.h"

#include <algorithm>
#include <regex>

namespace shardscope {

int decoderLayerOf(const std::string &name)
{
    static const std::regex decoder(R"(^decoder\.layers\.(\d+)\.)");
    std::smatch m;
    return std::regex_search(name, m, decoder) ? std::stoi(m[1].str()) : -1;
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
