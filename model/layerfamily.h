// SPDX-License-Identifier: MIT
#pragma once

#include <QString>

namespace shardscope::model {

/**
 * A key with its layer number taken out: `decoder.layers.7.mlp.linear_fc1.weight` is layer 7 of
 * the family `decoder.layers.{i}.mlp.linear_fc1.weight`. The first `layers.<n>` (or `layer.<n>`,
 * `h.<n>`, `blocks.<n>`) names the layer; experts and other numbers stay in the family.
 */
struct LayerKey
{
    QString family; ///< the key with `{i}` for the layer; empty when the key has no layer
    int layer = -1;
};

LayerKey layerKey(const QString &key);

/** The family's key of layer `layer`. */
QString keyOfLayer(const QString &family, int layer);

/** A glob matching every key of the family (the layer as `*`). */
QString familyGlob(const QString &family);

} // namespace shardscope::model
