// SPDX-License-Identifier: MIT
// Megatron's arguments: an argparse Namespace in a checkpoint, an args file or a command line.
#pragma once

#include "layout/modelspec.h"

#include <optional>

namespace shardscope::detail {

/** Whether a JSON object holds Megatron's argparse names rather than a Hugging Face config. */
bool isMegatronArgs(const nlohmann::json &j);
/** A Python list expression as --moe-layer-freq takes it ("[0]*3+[1]*58"); nullopt otherwise. */
std::optional<std::vector<int>> intListExpression(std::string text);
/** Megatron's arguments → the model. */
Result<ModelSpec> fromMegatronArgs(const nlohmann::json &a, const std::string &origin);
/** `--flag value` text (a Megatron command line or args file) → JSON of argparse names. */
nlohmann::json parseFlags(const std::string &text);
/** The arguments a Megatron checkpoint was saved with (its `args` entry). */
Result<nlohmann::json> argsOfCheckpoint(const std::string &path);
/** Whether a --megatron-version names a release up to 0.16. */
Result<bool> released016(const std::string &version, const std::string &origin);
/** The parallel sizes the arguments were run with; the options' where they are silent. */
ParallelConfig savedParallel(const nlohmann::json &a, const LayoutOptions &options);

} // namespace shardscope::detail
