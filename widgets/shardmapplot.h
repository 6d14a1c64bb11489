// SPDX-License-Identifier: MIT
#pragma once

#include "model/shardmap.h"
#include "plotframe.h"

class QCPTextElement;

namespace shardscope::widgets {

/**
 * The shard map of a stored tensor: its rows down, its columns across; each chunk a box in its
 * file's colour (a legend names the files), elements no chunk holds hatched, chunks that overlap
 * outlined in red, the rows where a fused tensor's sections begin as dashed lines with the
 * parameter's name, and, after a verified load, each rank's read as a labelled outline. Hover
 * names what is under the mouse.
 */
class ShardMapPlot : public PlotFrame
{
    Q_OBJECT

public:
    explicit ShardMapPlot(QWidget *parent = nullptr);

    void setMap(model::ShardMap map);
    const model::ShardMap &map() const { return m_map; }
    /** Chunks drawn as boxes at most (items are costly; the rest are counted, not drawn). */
    static constexpr size_t MaxBoxes = 2000;

private:
    QString describe(double col, double row) const;

    model::ShardMap m_map;
    QCPTextElement *m_title = nullptr;
};

} // namespace shardscope::widgets
