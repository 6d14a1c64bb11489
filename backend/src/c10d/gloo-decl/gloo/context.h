// SPDX-License-Identifier: MIT
// See ../README.md. Declared only; libtorch defines (and exports) it.
#pragma once
#include <chrono>
namespace gloo {
class Context
{
public:
    void setTimeout(std::chrono::milliseconds timeout);
};
} // namespace gloo
