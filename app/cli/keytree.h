// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardscope::cli {

/**
 * Keys grouped by dotted prefix, with runs of siblings that differ only in a number and hold
 * identical subtrees collapsed: decoder.layers.{0..60}.…, linear_fc1.weight{0..255}_w.
 */
struct KeyNode
{
    std::string name;
    std::string detail;  ///< leaf: "bfloat16 [7168, 2048]"; empty for groups
    std::string summary; ///< leaf: extra text not part of the identity (chunk count)
    size_t multiplicity = 1;
    std::vector<std::unique_ptr<KeyNode>> children;
};

class KeyTree
{
public:
    void add(std::string_view key, std::string detail, std::string summary);
    /** Collapses numbered siblings with identical subtrees, and single-child chains. */
    void collapse();
    /** Indented text, one line per node. */
    std::string render() const;

private:
    KeyNode m_root;
};

} // namespace shardscope::cli
