// SPDX-License-Identifier: MIT
// A torch.save pickle walked without running it, far enough to find where a training dict's
// entry and its values live in the memo: what a repair that appends to the pickle (Megatron's
// legacy rank files, whose args, optimizer and RNG states must stay as they are) refers back to.
#pragma once

#include "shardscope/result.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail {

/** A value the pickle builds, as far as the walk follows it. */
struct PickleNode
{
    enum class Kind : uint8_t { Opaque, None, Bool, Int, Str, Tuple, Global, Dict, Reduce, Persid };
    Kind kind = Kind::Opaque;
    int64_t number = 0;                             ///< Bool, Int
    std::string text;                               ///< Str; Global: "module.name"
    std::vector<std::shared_ptr<PickleNode>> items; ///< Tuple; Dict: key, value, key, value…
    std::shared_ptr<PickleNode> callable, args;     ///< Reduce (and NEWOBJ); Persid: args
    std::shared_ptr<PickleNode> state;              ///< what BUILD set on it
    int64_t memo = -1;                              ///< the first memo slot that holds it
    std::string constant; ///< the opcode that pushes it, for None, Bool and small Int
};

struct PickleScan
{
    std::shared_ptr<PickleNode> root;
    uint32_t protocol = 0;
    size_t stop = 0; ///< the offset of the final STOP
};

/** Walks `pickle` to its STOP. Fails on an opcode it does not know or a malformed stream. */
Result<PickleScan> scanPickle(std::string_view pickle);

/** A Dict node's value under the string key `key`, or null. */
const PickleNode *dictValue(const PickleNode &dict, std::string_view key);

} // namespace shardscope::detail
