// SPDX-License-Identifier: MIT
#include "checkpointtreemodel_p.h"

namespace shardscope::model {

void compactChains(std::vector<Node> &nodes, const std::vector<uint32_t> &children,
                   std::string &names)
{
    for (uint32_t g = 1; g < nodes.size(); ++g) {
        if (nodes[g].kind != NodeKind::Group || nodes[g].parent == NoNode)
            continue;
        while (nodes[g].childCount == 1 &&
               nodes[children[nodes[g].firstChild]].kind == NodeKind::Group) {
            const uint32_t c = children[nodes[g].firstChild];
            const std::string joined =
                std::string(names, nodes[g].nameOffset, nodes[g].nameLength) + '.' +
                std::string(names, nodes[c].nameOffset, nodes[c].nameLength);
            nodes[g].nameOffset = uint32_t(names.size());
            nodes[g].nameLength = uint32_t(joined.size());
            names += joined;
            nodes[g].firstChild = nodes[c].firstChild;
            nodes[g].childCount = nodes[c].childCount;
            for (uint32_t k = 0; k < nodes[g].childCount; ++k)
                nodes[children[nodes[g].firstChild + k]].parent = g;
            nodes[c].parent = NoNode;
            nodes[c].childCount = 0;
        }
    }
}

} // namespace shardscope::model
