// SPDX-License-Identifier: MIT
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <span>
#include <string>

namespace shardscope::detail {

/** SHA-256 fed piece by piece (a parameter streamed in windows), as lowercase hex. */
class Sha256
{
public:
    Sha256()
        : m_ctx(EVP_MD_CTX_new())
    {
        EVP_DigestInit_ex(m_ctx, EVP_sha256(), nullptr);
    }
    ~Sha256() { EVP_MD_CTX_free(m_ctx); }
    Sha256(const Sha256 &) = delete;
    Sha256 &operator=(const Sha256 &) = delete;
    void update(std::span<const std::byte> bytes)
    {
        EVP_DigestUpdate(m_ctx, bytes.data(), bytes.size());
    }
    std::string hex()
    {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(m_ctx, md, &len);
        static const char *digits = "0123456789abcdef";
        std::string out;
        for (unsigned i = 0; i < len; ++i) {
            out += digits[md[i] >> 4];
            out += digits[md[i] & 15];
        }
        return out;
    }

private:
    EVP_MD_CTX *m_ctx;
};

} // namespace shardscope::detail
