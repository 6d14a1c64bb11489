// SPDX-License-Identifier: MIT
// What travels in the remote protocol's blobs: the front door's requests and results as JSON
// values (MessagePack on the wire), every field of each type, and the index as the persistent
// index's entry (read/indexcodec.h).
//
// The results' public JSON schemas (shardscope.diff/1, verify/1, …) leave out what the window
// needs and a text output prints (each source's item number, the load plan, both infinities
// apart, the options a diff ran with), and write NaN as null: a client that decoded them could
// not print what the server would. So each type travels whole, and the client writes the
// schemas itself from what it decoded, byte for byte what the server would have written.
#pragma once

#include "shardscope/remote.h"
#include "shardscope/session.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace shardscope::detail::remote {

using json = nlohmann::json;

/** Every field of `value` (not the indexes and layouts requests point at: see the server). */
template<typename T>
json toJson(const T &value);
/** `T` from what toJson wrote; an error naming what does not fit. */
template<typename T>
Result<T> fromJson(const json &j);

/** An Error as it travels; what the server sent (or why it cannot be read: an Error too). */
json errorToJson(const Error &e);
Error errorFromJson(const json &j);

/**
 * An index as one blob: u32 LE length of a MessagePack header (format, paths, file sizes and
 * kinds, every info entry), the header, then the persistent index's entry of the tensors,
 * objects and problems. Decoded objects' values (torch.save leaves) do not travel: the server
 * reads an object when asked.
 */
struct IndexBlob
{
    std::string header; ///< u32 LE length, then the MessagePack header
    /** The entry: the persistent index's own file when the open read or wrote one (nothing
     *  to encode), else encoded here. */
    std::shared_ptr<const void> keep;
    std::string_view entry;
    /** The persistent index's file the entry is (its compressed form is kept beside it), or
     *  one still being written; empty when it was encoded here. */
    std::string entryPath;
    /** What names these bytes: the entry's checksum and the header's (a client that holds a
     *  blob of this identity holds this index). */
    std::string identity;
};
IndexBlob indexBlob(const CheckpointIndex &index);
/** The entry's part of an identity (its checksum), which the "entry" message names. */
std::string entryIdentity(std::string_view entry);
inline std::string_view entryPartOf(std::string_view identity)
{
    return identity.size() > 17 ? identity.substr(17) : std::string_view();
}
/** indexBlob() as one string (tests). */
std::string encodeIndexBlob(const CheckpointIndex &index);
Result<std::shared_ptr<const CheckpointIndex>>
decodeIndexBlob(std::string_view bytes, const std::string &origin, int threads = 0);
/** The same from a header and an entry apart (the server's fresh header, the entry a client
 *  kept). `view`: the entry's bytes stay mapped for the life of the process, and the index's
 *  tensors view them (shardscope/compact.h). */
Result<std::shared_ptr<const CheckpointIndex>> decodeIndexBlob(std::string_view header,
                                                               std::string_view entry,
                                                               const std::string &origin,
                                                               int threads, bool view);
/** decodeIndexBlob() in two steps: the entry (a kept one may be decoded while the server
 *  opens), then the header that comes with it. */
Result<std::shared_ptr<CheckpointIndex>>
decodeIndexEntry(std::string_view entry, const std::string &origin, int threads, bool view);
Status applyIndexHeader(std::string_view header, CheckpointIndex &index, const std::string &origin);
/** The header and the entry of a blob; an error when it is cut short. */
Result<std::pair<std::string_view, std::string_view>> splitIndexBlob(std::string_view bytes);

/** An InspectResult whose entries are item numbers of the index it was run on. */
json inspectToJson(const InspectResult &result);
Result<InspectResult> inspectFromJson(const json &j, std::shared_ptr<const CheckpointIndex> index);

/** verify --json's shardscope.verify/1 read back (a job launched through srun or torchrun
 *  prints it): every field the schema holds; the plan is not in it. */
Result<VerifyReport> verifyFromSchema(const std::string &text);

} // namespace shardscope::detail::remote
