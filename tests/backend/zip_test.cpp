// SPDX-License-Identifier: MIT
// Malformed zip archives (hand-built headers: no writer produces these).
#include "read/ziparchive.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace shardscope;
using namespace shardscope::detail;

namespace {

void put16(std::vector<uint8_t> &b, size_t at, uint16_t v)
{
    std::memcpy(&b[at], &v, 2);
}
void put32(std::vector<uint8_t> &b, size_t at, uint32_t v)
{
    std::memcpy(&b[at], &v, 4);
}

// A classic EOCD with the given entry count, central directory size and offset.
std::vector<uint8_t> eocdOnly(uint16_t entries, uint32_t cdSize, uint32_t cdOffset)
{
    std::vector<uint8_t> b(22, 0);
    put32(b, 0, 0x06054b50);
    put16(b, 8, entries);
    put16(b, 10, entries);
    put32(b, 12, cdSize);
    put32(b, 16, cdOffset);
    return b;
}

} // namespace

TEST(Zip, TooShort)
{
    std::vector<uint8_t> b(10, 0);
    auto r = ZipArchive::parse(b, 500);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(*r.error().offset, 500u);
}

TEST(Zip, NoEndRecord)
{
    std::vector<uint8_t> b(4096, 'Z');
    auto r = ZipArchive::parse(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("end-of-central-directory"), std::string::npos);
}

TEST(Zip, CentralDirectoryOutsideArchive)
{
    auto b = eocdOnly(1, 46, 0x7fffffff);
    auto r = ZipArchive::parse(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("outside"), std::string::npos);
}

TEST(Zip, AbsurdEntryCountIsRejectedBeforeAllocating)
{
    std::vector<uint8_t> b(100, 0);
    auto tail = eocdOnly(65535, 46, 0);
    b.insert(b.end(), tail.begin(), tail.end());
    auto r = ZipArchive::parse(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("claims"), std::string::npos);
}
