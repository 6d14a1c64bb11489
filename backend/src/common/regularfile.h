// SPDX-License-Identifier: MIT
// Every file the backend reads is opened here: only a regular file is read. A FIFO's open()
// blocks until a writer comes, a socket cannot be opened, /dev/zero and /dev/urandom never end,
// and a block device is a disk, not a checkpoint: each is refused in one line, before any read.
#pragma once

#include "shardscope/result.h"

#include <cstdint>
#include <string>
#include <sys/types.h>

namespace shardscope::detail {

/** "a FIFO", "a socket", "a character device", … for a file that is not regular; empty when it
 *  is regular. */
std::string fileKindName(mode_t mode);

/** The one-line error for `path`, which is `kind` (fileKindName) rather than a regular file. */
Error notRegularFile(const std::string &path, const std::string &kind);

/**
 * Opens `path` read-only when it is a regular file (symlinks followed): checked by stat()
 * before the open, and by fstat() on what was opened (the path may change in between); the
 * open never blocks. The caller owns the descriptor.
 */
Result<int> openRegularFile(const std::string &path);

/** Reads a whole regular file of at most `maxBytes` into a string. */
Result<std::string> readRegularFile(const std::string &path, uint64_t maxBytes);

} // namespace shardscope::detail
