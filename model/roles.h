// SPDX-License-Identifier: MIT
#pragma once

#include <Qt>

namespace shardscope::model {

/**
 * Custom item roles of CheckpointTreeModel. Views, proxies and selection code read these typed
 * values; nothing ever parses a display string.
 */
enum ItemRole : int {
    KeyRole = Qt::UserRole + 1, ///< QString: the full key (groups: their dotted prefix)
    KindRole,                   ///< int: a NodeKind
    NumelRole,                  ///< qlonglong: elements (groups: sum over their tensors)
    BytesRole,                  ///< qulonglong: stored bytes (groups: sum)
    ChunkCountRole,             ///< qulonglong: stored chunks (groups: sum)
    HasProblemRole,             ///< bool: a problem names this entry (groups: one below)
    ProblemCountRole,           ///< int: problems naming this entry (groups: sum below)
    DTypeRole,                  ///< QString: torch dtype name; empty for groups and objects
    EntryIndexRole,             ///< int: index into CheckpointIndex::tensors or ::objects; -1
    SortRole,                   ///< per column: a QString or a number to sort by
    LeafCountRole,              ///< qulonglong: entries at or below (a leaf: 1)
    LoadMarkRole,               ///< int: a LoadMark (groups: the worst below)
    LoadMarkCountRole,          ///< int: groups: leaves below with the worst mark
};

/** What a node of the tree stands for. */
enum class NodeKind : int {
    Group,  ///< a dotted prefix shared by several keys
    Tensor, ///< a TensorEntry
    Object, ///< an ObjectEntry
};

/** Columns of CheckpointTreeModel. */
enum Column : int {
    NameColumn,
    DTypeColumn,
    ShapeColumn,
    ChunksColumn,
    SizeColumn,
    LoadColumn, ///< what the load does with it (once diffed; loadmarks.h)
    StatusColumn,
    ColumnCount,
};

} // namespace shardscope::model
