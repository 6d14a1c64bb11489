// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/result.h>

#include <QString>

#include <sys/types.h>

#include <optional>
#include <string>

namespace shardscope::model {

/**
 * The window's generated layout (a temporary file) copied to where a report or a repair names
 * it, so that the command they print outlives the window. What that path held before (the
 * layout an earlier repair of the same output wrote, say) is kept until the job is known: a job
 * that writes nothing puts it back rather than leave a manifest naming a file that is gone. Held
 * in memory, not hard-linked aside: a layout is small, and some file systems (and
 * fs.protected_hardlinks) refuse a link where a rename works.
 */
class KeptLayout
{
public:
    KeptLayout() = default;
    KeptLayout(const KeptLayout &) = delete;
    KeptLayout &operator=(const KeptLayout &) = delete;
    /** Without keep() (a job that failed or threw), what was there is put back. */
    ~KeptLayout();

    std::optional<Error> copy(const QString &from, const QString &to);
    /** The job wrote what names the copy: it stays. */
    void keep();
    /** Nothing names the copy: what was there before is back, or the copy goes. Only while the
     *  path still holds this copy: another job's file written since is left alone. */
    void undo();

private:
    std::string m_to; ///< empty once kept or undone
    std::optional<std::string> m_earlier;
    dev_t m_device = 0;
    ino_t m_inode = 0;
};

} // namespace shardscope::model
