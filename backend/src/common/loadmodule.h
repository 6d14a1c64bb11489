// SPDX-License-Identifier: MIT
// Our own modules (libtorch's, NCCL's), loaded on first use.
#pragma once

#include "shardscope/result.h"

#include <string>

namespace shardscope::detail {

/**
 * dlopen()s the first module that loads and exports `entry`: the file `envVar` names, else
 * `fileName` beside the executable (an installed layout), else `builtAt` (where this build put
 * it). Returns the entry's address, or why none would do (empty when no file was there). The
 * module is never unloaded: what it made lives on.
 */
Result<void *> loadModuleEntry(const char *envVar, const std::string &fileName,
                               const std::string &builtAt, const char *entry);

} // namespace shardscope::detail
