// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/checkpoint.h>

#include <gtest/gtest.h>

#include <string>

/** Every field of two indexes equal (info without the keys that say how it was read). */
inline void expectSameIndex(const shardscope::CheckpointIndex &a,
                            const shardscope::CheckpointIndex &b, const std::string &dir)
{
    using namespace shardscope;
    SCOPED_TRACE(dir);
    EXPECT_EQ(a.format, b.format);
    EXPECT_EQ(a.files, b.files);
    EXPECT_EQ(a.fileSizes, b.fileSizes);
    EXPECT_EQ(a.fileKinds, b.fileKinds);
    EXPECT_EQ(a.transformChains, b.transformChains);
    auto info = [](std::map<std::string, std::string> m) {
        m.erase("index_cache");
        return m;
    };
    EXPECT_EQ(info(a.info), info(b.info));
    auto sameLocation = [](const Location &x, const Location &y) {
        return x.file == y.file && x.offset == y.offset && x.length == y.length &&
               x.transforms == y.transforms && x.encoding == y.encoding;
    };
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i) {
        const TensorEntry &x = a.tensors[i], &y = b.tensors[i];
        SCOPED_TRACE(x.key);
        EXPECT_EQ(x.key, y.key);
        EXPECT_EQ(x.dtype, y.dtype);
        EXPECT_EQ(x.dtypeName, y.dtypeName);
        EXPECT_EQ(x.shape, y.shape);
        EXPECT_EQ(x.chunkDims, y.chunkDims);
        EXPECT_EQ(x.strides, y.strides);
        EXPECT_EQ(x.storageOffset, y.storageOffset);
        EXPECT_EQ(x.path.parts(x.key), y.path.parts(y.key));
        ASSERT_EQ(x.chunks.size(), y.chunks.size());
        for (size_t c = 0; c < x.chunks.size(); ++c)
            EXPECT_TRUE(sameLocation(x.chunks[c], y.chunks[c])) << "chunk " << c;
    }
    ASSERT_EQ(a.objects.size(), b.objects.size());
    for (size_t i = 0; i < a.objects.size(); ++i) {
        const ObjectEntry &x = a.objects[i], &y = b.objects[i];
        EXPECT_EQ(x.key, y.key);
        EXPECT_EQ(x.path.parts(x.key), y.path.parts(y.key));
        ASSERT_EQ(x.location.has_value(), y.location.has_value()) << x.key;
        if (x.location) {
            EXPECT_TRUE(sameLocation(*x.location, *y.location)) << x.key;
        }
        EXPECT_EQ(x.value != nullptr, y.value != nullptr) << x.key;
    }
    ASSERT_EQ(a.problems.size(), b.problems.size());
    for (size_t i = 0; i < a.problems.size(); ++i) {
        EXPECT_EQ(a.problems[i].key, b.problems[i].key);
        EXPECT_EQ(a.problems[i].file, b.problems[i].file);
        EXPECT_EQ(a.problems[i].offset, b.problems[i].offset);
        EXPECT_EQ(a.problems[i].message, b.problems[i].message);
        EXPECT_EQ(a.problems[i].effect, b.problems[i].effect);
    }
}
