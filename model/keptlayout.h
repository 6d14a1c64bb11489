// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/result.h>

#include <QString>

#include <optional>
#include <string>

namespace shardscope::model {

/**
 * The window's generated layout (a temporary file) copied to where a report or a repair names
 * it, so that the command they print outlives the window. What that path held before, the layout
 * an earlier repair of the same output wrote, say, is kept (hard-linked aside) until the job is
 * known: a job that writes nothing puts it back rather than leaving a manifest naming a file
 * that is gone.
 */
class KeptLayout
{
public:
    KeptLayout() = default;
    KeptLayout(const KeptLayout &) = delete;
    KeptLayout &operator=(const KeptLayout &) = delete;
    /** Without keep() or undo() (a job that threw, say), what was there is put back. */
    ~KeptLayout();

    std::optional<Error> copy(const QString &from, const QString &to);
    /** The job wrote what names the copy: it stays, what was there before goes. */
    void keep();
    /** Nothing names the copy: it goes, and what was there before is back. */
    void undo();

private:
    std::string m_to;    ///< empty once kept or undone
    std::string m_aside; ///< the earlier file, hard-linked aside, or empty
};

} // namespace shardscope::model
