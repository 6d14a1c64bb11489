// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/result.h"

#include <optional>
#include <string>
#include <string_view>

namespace shardscope {

/**
 * Writes `content` to `path` so that `path` holds either its previous content or all of the new
 * one, never a part: a temporary file beside it is written, flushed to disk and renamed over it.
 * A full disk, a write error or a signal before the rename leaves `path` as it was (and no
 * temporary file, except after SIGKILL). The new file gets the permissions a plain create would.
 * Returns the error (naming the file) or nothing.
 */
std::optional<Error> writeFileAtomically(const std::string &path, std::string_view content);

/** How writeFileAtomically() may differ for files that are not the user's output. */
struct AtomicWriteOptions
{
    /** fsync() before the rename. Off for a cache, whose own checksum finds a torn file. */
    bool flush = true;
    /** Permissions of the new file (e.g. 0600); -1: as described above. */
    int mode = -1;
};
std::optional<Error> writeFileAtomically(const std::string &path, std::string_view content,
                                         const AtomicWriteOptions &options);

} // namespace shardscope
