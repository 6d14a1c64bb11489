// SPDX-License-Identifier: MIT
// The repaired checkpoint on disk: the source's tree mirrored into a new directory (files
// hard-linked, or symlinked where a hard link is impossible, or copied), its `.metadata`
// replaced, a manifest on top. Built in a temporary directory beside the output and renamed
// into place, so that the output is whole or absent; nothing is ever written into the source.
#pragma once

#include "shardscope/checkpoint.h"
#include "shardscope/fix.h"
#include "shardscope/result.h"

#include <functional>
#include <set>
#include <string>

namespace shardscope::detail {

struct FixOutputOptions
{
    std::string output;
    bool copy = false;  ///< copy every file instead of linking
    bool force = false; ///< replace an output that an earlier fix wrote (its manifest says so)
    /** The manifest's JSON text, made once the files are written (it counts their bytes). */
    std::function<std::string()> manifest;
    /** A new data file beside the `.metadata` (rewritten keys), written by `writeData`. */
    std::string dataFile;
    std::function<Status(int fd, const std::string &path)> writeData;
    /** A format whose names live inside its files (torch.save, safetensors): writes them into
     *  the new directory, placing the files it carries over with the given function; instead of
     *  mirroring the tree and writing a `.metadata`. */
    using Place = std::function<Status(const std::string &from, const std::string &to)>;
    std::function<Status(const std::string &dir, const Place &place)> writeFiles;
    /** A format whose names live inside some of its files (Megatron's legacy rank files): the
     *  tree is mirrored without `replaced` (paths relative to the data directory), which
     *  `writeInto` then writes into the new data directory; no `.metadata`. */
    std::set<std::string> replaced;
    std::function<Status(const std::string &dataDir)> writeInto;
    /** Called with the finished tree's top (the temporary directory) before the manifest is
     *  written and the tree takes the output's name: the output read back and checked. An
     *  error stops the fix and removes the tree; a check that finds the load still failing
     *  says so in the result, which the manifest then records. The index being written is not
     *  read from then on (the check may free it). */
    std::function<Status(const std::string &top)> check;
};

/**
 * Writes `fixed` (an index over its source's files, in the source's directory) as a checkpoint
 * at options.output, with its `.metadata` written from it. Fills the file counts and the
 * metadata's size in `result`.
 */
Status writeFixedCheckpoint(const CheckpointIndex &fixed, const FixOutputOptions &options,
                            FixResult &result);

/** The top of a checkpoint's tree: a Megatron root, the DCP (or safetensors) directory itself,
 *  or the file a one-file checkpoint is. */
std::string checkpointTop(const CheckpointIndex &index);

} // namespace shardscope::detail
