// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/checkpoint.h>

#include <QAbstractItemModel>
#include <QStringList>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace shardscope::model::test {

inline QStringList strings(std::initializer_list<const char *> list)
{
    QStringList out;
    for (const char *s : list)
        out.push_back(QString::fromUtf8(s));
    return out;
}

/** A tensor entry with `chunks` chunks split along dimension 0 (or whole, for scalars). */
inline TensorEntry makeTensor(std::string key, DType dtype, std::vector<int64_t> shape,
                              int chunks = 1, uint32_t file = 0)
{
    TensorEntry t;
    t.key = std::move(key);
    t.dtype = dtype;
    t.dtypeName = std::string(dtypeName(dtype));
    t.shape = std::move(shape);
    const size_t nd = t.shape.size();
    const int64_t rows = nd ? t.shape[0] : 1;
    const int64_t per = (rows + chunks - 1) / chunks;
    for (int c = 0; c < chunks; ++c) {
        Location loc;
        loc.file = file;
        loc.offset = uint64_t(c) * 4096;
        loc.length = 4096;
        t.chunks.push_back(loc);
        for (size_t d = 0; d < nd; ++d)
            t.chunkDims.push_back(d == 0 ? c * per : 0);
        for (size_t d = 0; d < nd; ++d)
            t.chunkDims.push_back(d == 0 ? std::min(per, rows - c * per) : t.shape[d]);
    }
    return t;
}

inline ObjectEntry makeObject(std::string key, int64_t value)
{
    ObjectEntry o;
    o.key = std::move(key);
    auto v = std::make_shared<PyValue>();
    v->kind = PyValue::Kind::Int;
    v->integer = value;
    o.value = v;
    return o;
}

/**
 * model.embed.weight              bfloat16 [16, 8]   2 chunks
 * model.layers.0.attn.weight      float32  [8, 8]
 * model.layers.0.mlp.weight       float32  [32, 8]   4 chunks, one problem
 * model.layers.1.attn.weight      float32  [8, 8]
 * model.layers.1.mlp.weight       float32  [32, 8]
 * model.layers.10.attn.weight     float32  [8, 8]
 * model.norm                      float32  [8]
 * scale                           float64  []
 * iteration                       object (42)
 */
inline std::shared_ptr<const CheckpointIndex> makeSmallIndex()
{
    auto index = std::make_shared<CheckpointIndex>();
    index->format = Format::Dcp;
    index->files = {"__0_0.distcp", "__1_0.distcp"};
    index->fileSizes = {1 << 20, 1 << 20};
    index->tensors.push_back(makeTensor("model.embed.weight", DType::BFloat16, {16, 8}, 2, 1));
    index->tensors.push_back(makeTensor("model.layers.0.attn.weight", DType::Float32, {8, 8}));
    index->tensors.push_back(makeTensor("model.layers.0.mlp.weight", DType::Float32, {32, 8}, 4));
    index->tensors.push_back(makeTensor("model.layers.1.attn.weight", DType::Float32, {8, 8}));
    index->tensors.push_back(makeTensor("model.layers.1.mlp.weight", DType::Float32, {32, 8}));
    index->tensors.push_back(makeTensor("model.layers.10.attn.weight", DType::Float32, {8, 8}));
    index->tensors.push_back(makeTensor("model.norm", DType::Float32, {8}));
    index->tensors.push_back(makeTensor("scale", DType::Float64, {}));
    index->objects.push_back(makeObject("iteration", 42));
    index->problems.push_back({"model.layers.0.mlp.weight", "__0_0.distcp", 8192,
                               "chunk 2 extends past end of file", Problem::Effect::Unreadable});
    index->problems.push_back({"", ".metadata", std::nullopt, "unreferenced file __9_0.distcp"});
    return index;
}

/** Display texts of the children of `parent`, column 0. */
inline QStringList childNames(const QAbstractItemModel &m, const QModelIndex &parent = {})
{
    QStringList out;
    for (int r = 0; r < m.rowCount(parent); ++r)
        out.push_back(m.index(r, 0, parent).data().toString());
    return out;
}

/** Index of the child named `name` under `parent` (column 0); invalid if none. */
inline QModelIndex child(const QAbstractItemModel &m, const QModelIndex &parent,
                         const QString &name)
{
    for (int r = 0; r < m.rowCount(parent); ++r) {
        const QModelIndex i = m.index(r, 0, parent);
        if (i.data().toString() == name)
            return i;
    }
    return {};
}

/** Follows a path of names from the root. */
inline QModelIndex path(const QAbstractItemModel &m, const QStringList &names)
{
    QModelIndex i;
    for (const QString &n : names) {
        i = child(m, i, n);
        if (!i.isValid())
            return {};
    }
    return i;
}

} // namespace shardscope::model::test
