// SPDX-License-Identifier: MIT
// Our dtypes as libtorch's scalar types: for the files that hand bytes to libtorch.
#pragma once

#include "shardscope/dtype.h"

#include <c10/core/ScalarType.h>

#include <optional>

namespace shardscope::detail {

/** nullopt for a dtype libtorch has no scalar type for. */
std::optional<c10::ScalarType> scalarType(DType t);

} // namespace shardscope::detail
