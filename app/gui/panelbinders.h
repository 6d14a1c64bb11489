// SPDX-License-Identifier: MIT
// Each panel bound to the session by a small binder of its own: what the panel asks for becomes
// a session job, what the session announces reaches the panel. One file each.
#pragma once

#include <memory>

namespace shardscope::model {
class CheckpointSession;
class RemoteBackend;
} // namespace shardscope::model

namespace shardscope::widgets {
class ComparePanel;
class DiffPanel;
class LayerPlot;
class VerifyPanel;
} // namespace shardscope::widgets

namespace shardscope::gui {

class WindowServices;

/** The rules and strictness controls run the diff again; a selected entry shows in the tree. */
void bindDiffPanel(widgets::DiffPanel *panel, model::CheckpointSession *session,
                   WindowServices &window);
/** Run and Cancel, the progress of a verification, its result and the tree's marks; for a
 *  checkpoint on another host (`remote`), where it runs there, kept per host. */
void bindVerifyPanel(widgets::VerifyPanel *panel, model::CheckpointSession *session,
                     WindowServices &window,
                     const std::shared_ptr<model::RemoteBackend> &remote = nullptr);
/** The second checkpoint, its structure as soon as it is open, its values when asked. */
void bindComparePanel(widgets::ComparePanel *panel, model::CheckpointSession *session,
                      WindowServices &window);
/** Asks for the checkpoint to compare with (File ▸ Compare With…, the panel's Choose): on
 *  this computer, on the open checkpoint's host, or on another host, then opens it. */
void chooseCompare(model::CheckpointSession *session, WindowServices &window);
/** A family's statistics across layers, and a clicked layer's tensor in the tree. */
void bindLayerPlot(widgets::LayerPlot *plot, model::CheckpointSession *session,
                   WindowServices &window);

} // namespace shardscope::gui
