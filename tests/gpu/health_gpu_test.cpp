// SPDX-License-Identifier: MIT
// GPU-only: the CUDA health kernels against the CPU path on every tensor of the real-torch
// fixtures. Skips without a CUDA device (label: gpu).
#include <shardscope/checkpoint.h>
#include <shardscope/devices.h>
#include <shardscope/health.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

using namespace shardscope;

TEST(HealthGpu, SameAsCpuOnEveryFixtureTensor)
{
    if (!builtWithCuda() || cudaDevices().empty())
        GTEST_SKIP() << "no CUDA device";
    const char *dir = std::getenv("SHARDSCOPE_FIXTURES");
    const std::filesystem::path fixtures = dir ? dir : SHARDSCOPE_FIXTURES_DIR;
    int compared = 0;
    for (const char *name : {"dcp_1rank", "dcp_4ranks", "megatron_fsdp_dtensor"}) {
        auto index = openCheckpoint((fixtures / name).string());
        ASSERT_TRUE(index.ok()) << name;
        for (const TensorEntry &t : index->tensors) {
            auto data = readTensor(*index, t);
            if (!data)
                continue;
            auto cpu = computeHealth(*data);
            if (!cpu)
                continue; // complex: not a health dtype
            auto gpu = computeHealth(*data, ComputeDevice::Cuda);
            ASSERT_TRUE(gpu.ok()) << gpu.error().toString();
            EXPECT_EQ(gpu->count, cpu->count) << t.key;
            EXPECT_EQ(gpu->nanCount, cpu->nanCount) << t.key;
            EXPECT_EQ(gpu->denormalCount, cpu->denormalCount) << t.key;
            // Bit for bit: same segments, same merge order.
            EXPECT_EQ(std::memcmp(&gpu->mean, &cpu->mean, sizeof(double)), 0) << t.key;
            EXPECT_EQ(std::memcmp(&gpu->std, &cpu->std, sizeof(double)), 0) << t.key;
            EXPECT_EQ(gpu->min, cpu->min) << t.key;
            EXPECT_EQ(gpu->max, cpu->max) << t.key;
            EXPECT_EQ(gpu->histogram, cpu->histogram) << t.key;
            EXPECT_EQ(gpu->fingerprint, cpu->fingerprint) << t.key;
            ++compared;
        }
    }
    EXPECT_GT(compared, 100);
}
