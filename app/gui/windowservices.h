// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/diff.h>

#include <QString>

class QWidget;

namespace shardscope::gui {

/**
 * What a panel's binder may ask of the window it sits in: the window composes the panels, the
 * binders connect each one to the session, and neither reaches into the other's widgets.
 */
class WindowServices
{
public:
    virtual ~WindowServices() = default;
    /** Selects the tree's entry with this stored key (and shows its details). */
    virtual void selectStoredKey(const QString &key) = 0;
    /** "problems", "diff", "verify", "compare" below the tree; "details", "shards", "layers". */
    virtual void showPanel(const QString &name) = 0;
    /** The diff panel's rules, strictness and partial load: every job loads with them. */
    virtual shardscope::DiffOptions diffOptions() const = 0;
    /** The tree's Load column from the diff and the verification. */
    virtual void updateLoadMarks() = 0;
    virtual void showError(const QString &title, const QString &message) = 0;
    /** The parent for dialogs. */
    virtual QWidget *dialogParent() = 0;
};

} // namespace shardscope::gui
