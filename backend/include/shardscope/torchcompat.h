// SPDX-License-Identifier: MIT
// Which torch reads a DCP checkpoint's metadata: derived from the forms its `.metadata` holds,
// against what each torch release's unpickler and reader accept.
#pragma once

#include "shardscope/checkpoint.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** A torch release line (2.11 stands for 2.11.x: no patch release changed what DCP reads). */
struct TorchVersion
{
    int major = 0, minor = 0;
    auto operator<=>(const TorchVersion &) const = default;
    std::string text() const { return std::to_string(major) + "." + std::to_string(minor); }
};

/** The releases whose DCP sources the table was read from: 2.4 to the newest on PyPI. */
inline constexpr TorchVersion kOldestTorchChecked{2, 4}, kNewestTorchChecked{2, 15};

/** "2.11", "2.11.0", "v2.11" → 2.11; nullopt otherwise. */
std::optional<TorchVersion> parseTorchVersion(std::string_view text);

/** One thing in the metadata that some checked torch cannot read. */
struct TorchLimit
{
    std::optional<TorchVersion> from; ///< the first checked release that reads it; none: no release
    std::string why;                  ///< one line: what the metadata holds, what older torch does
};

struct TorchReadability
{
    bool applies = false; ///< a DCP-based checkpoint (its .metadata is what torch unpickles)
    /** The checked releases that read it: from..newest checked, and later as far as known.
     *  nullopt: none of them. */
    std::optional<TorchVersion> from;
    std::vector<TorchLimit> limits; ///< what keeps older releases out, the strictest first
    bool reads(TorchVersion v) const { return applies && from && v >= *from; }
    /** "torch 2.15 and later", "torch 2.4 and later", "no torch 2.4–2.15". */
    std::string text() const;
    /** text() and why: "torch 2.15 and later (TensorProperties pickled with 6 fields …)". */
    std::string explained() const;
};

/** What the checkpoint's metadata, as stored, lets torch read. */
TorchReadability torchReadability(const CheckpointIndex &index);

/**
 * What the same index would let torch read once fix writes its metadata anew (TensorProperties
 * in the five fields every checked release reads): only what the data itself needs remains
 * (its dtypes, items stored through transforms).
 */
TorchReadability torchReadabilityRewritten(const CheckpointIndex &index);

} // namespace shardscope
