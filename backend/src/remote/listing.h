// SPDX-License-Identifier: MIT
// A directory's entries for a client's file browser (the protocol's "list"): names, kinds and
// sizes read with readdir and fstatat, never a file opened; each subdirectory peeked at by its
// names alone to say whether it looks like a checkpoint.
#pragma once

#include "remote/codec.h"
#include "shardscope/remote.h"

#include <string>

namespace shardscope::detail::remote {

/** `path` listed ("" or "~": $HOME; "~/…" under it); an error naming it when it is not a
 *  directory this user may read. At most `maxEntries` entries (the rest counted in leftOut). */
Result<RemoteListing> listDirectory(const std::string &path, const CancelToken &cancel = {},
                                    size_t maxEntries = 20000);

json listingToJson(const RemoteListing &listing);
Result<RemoteListing> listingFromJson(const json &j);

} // namespace shardscope::detail::remote
