// SPDX-License-Identifier: MIT
#pragma once

#include <QMetaType>
#include <QString>

namespace shardscope::model {

/** What a job of the session computes; every listener tells jobs apart by this. */
enum class JobKind {
    Open,        ///< the checkpoint the window shows
    OpenCompare, ///< the second checkpoint, to compare with
    Details,     ///< one tensor's statistics, hash and histogram
    Object,      ///< one non-tensor entry decoded
    Layout,      ///< a layout generated from a model config
    Diff,
    Verify,
    Compare, ///< two checkpoints' structure
    Values,  ///< two checkpoints' values
    Export,
    LayerStats,
    Reload, ///< what changed on disk since the previous open
    Repair,
};

/** One job as its listeners see it: started, progressing and ended, each once, in that order. */
struct JobInfo
{
    quint64 id = 0;
    JobKind kind = JobKind::Open;
    QString title; ///< "Diff against layout.json"

    /** Jobs a user waits for and may cancel (the status bar shows them); a selection's details
     *  and objects are answered quietly. */
    bool shown() const { return kind != JobKind::Details && kind != JobKind::Object; }
};

/** jobEnded's message for a job that was cancelled (or superseded by a newer one). */
QString jobCancelledText();

} // namespace shardscope::model

Q_DECLARE_METATYPE(shardscope::model::JobInfo)
