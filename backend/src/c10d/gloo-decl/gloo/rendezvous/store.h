// SPDX-License-Identifier: MIT
// See ../../README.md. c10d's GlooStore derives from it and overrides these; ShardScope never
// makes one (libtorch does, with its own definition).
#pragma once
#include <chrono>
#include <string>
#include <vector>
namespace gloo::rendezvous {
class Store
{
public:
    virtual ~Store() = default;
    virtual void set(const std::string &key, const std::vector<char> &data) = 0;
    virtual std::vector<char> get(const std::string &key) = 0;
    virtual void wait(const std::vector<std::string> &keys) = 0;
    virtual void wait(const std::vector<std::string> &keys,
                      const std::chrono::milliseconds &timeout) = 0;
};
} // namespace gloo::rendezvous
