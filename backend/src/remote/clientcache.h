// SPDX-License-Identifier: MIT
// The indexes a client received, kept in the user's cache (the persistent index's directory,
// SHARDSCOPE_CACHE_DIR and SHARDSCOPE_NO_CACHE as there): reopening a remote checkpoint whose
// metadata did not change moves no index over the wire, and its entries view the kept file, as
// an open from the persistent index views its entry.
#pragma once

#include "read/mappedfile.h"
#include "shardscope/checkpoint.h"
#include "shardscope/remote.h"

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail::remote {

class ClientIndexCache
{
public:
    /** For `path` on `target`'s host; off when the user's cache is. */
    ClientIndexCache(const RemoteTarget &target, const std::string &path);
    bool enabled() const { return !m_dir.empty(); }
    /** The identities held for this host and path (newest first; the server sends the index
     *  only when its own is none of them). */
    std::vector<std::string> identities() const;
    /** An index kept here, mapped. */
    struct Kept
    {
        std::shared_ptr<const MappedFile> file;
        std::string_view header;        ///< the header of the open it came with (the wire's)
        std::span<const uint8_t> entry; ///< the persistent index's entry, 8-byte aligned
    };
    /** The index kept under `identity`: NotFound when it is gone; an error naming the file
     *  when it is not a kept index (open() removes it). */
    Result<Kept> kept(const std::string &identity) const;
    /** Its entry, decoded as an open from the persistent index decodes one
     *  (read/indexcache.h's openIndexEntry: checked whole, then viewing the mapped file), and
     *  its header into `header`. One that does not check out is removed, and is NotFound too:
     *  the server is then asked for the whole index, never is it trusted. */
    Result<std::shared_ptr<CheckpointIndex>> open(const std::string &identity,
                                                  const std::string &origin,
                                                  std::string *header = nullptr) const;
    /** Keeps a received blob under `identity` (after the call returns), and lets this path's
     *  older ones go, and the least recently used past SHARDSCOPE_CACHE_MAX_MB. */
    void store(const std::string &identity, std::string_view blob,
               std::shared_ptr<const void> keep) const;
    /** The same for a blob received as its header and its entry apart. */
    void store(const std::string &identity, std::string header, std::string_view entry,
               std::shared_ptr<const void> keep) const;

private:
    std::string fileOf(const std::string &identity) const;
    void drop(const std::string &identity) const;
    std::string m_dir, m_prefix;
    uint64_t m_maxBytes = 0;
};

/** Waits until every kept blob this process began writing is written. */
void waitForClientCacheWrites();

} // namespace shardscope::detail::remote
