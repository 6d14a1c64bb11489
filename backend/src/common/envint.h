// SPDX-License-Identifier: MIT
#pragma once

#include "shardscope/result.h"

#include <cstdlib>
#include <string>

namespace shardscope::detail {

/** A non-negative integer from the environment; `fallback` when unset and not `required`. */
inline Result<int> envInt(const char *name, bool required, int fallback = 0)
{
    const char *v = std::getenv(name);
    if (!v)
        return required ? Result<int>(makeError(Error::Code::NotFound,
                                                std::string("environment variable ") + name +
                                                    " is not set"))
                        : Result<int>(fallback);
    char *end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 0 || x > (1 << 24))
        return makeError(Error::Code::Format, std::string("environment variable ") + name + "='" +
                                                  v + "' is not a non-negative integer");
    return int(x);
}

} // namespace shardscope::detail
