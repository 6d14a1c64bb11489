// SPDX-License-Identifier: MIT
// Causes that the keys as a whole show, not one parameter's: a prefix on every key, an output
// layer saved tied, buffers a model recomputes, vocabulary padding.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::detail {

/** A prefix that the checkpoint's keys carry and the model's names do not, or the reverse. */
struct KeyPrefix
{
    std::string prefix; ///< with its trailing dot: "model."
    bool stored = true; ///< true: on the stored keys (strip it); false: on the model's (add it)
    size_t matches = 0; ///< names it explains
    /** The stored key the model's `name` is saved under. */
    std::string storedName(std::string_view name) const;
};

/**
 * The one prefix that explains most of the model's names that are not stored as they are, when
 * it explains at least half of them (a prefix on every key, not a coincidence of a few).
 */
std::optional<KeyPrefix> commonKeyPrefix(std::span<const std::string_view> stored,
                                         std::span<const std::string_view> wanted);

/** The embedding whose tensor a tied output layer `name` shares, or empty when it is none. */
std::vector<std::string> tiedEmbeddingsOf(std::string_view name);

/**
 * For a stored key that no parameter asks for: why it is harmless when it is a buffer that
 * models recompute at init (rotary inv_freq, position_ids, causal masks), else empty.
 */
std::string recomputedBufferNote(std::string_view key);

/**
 * Rows that are vocabulary padding: `stored` is `want` rounded up to a multiple of some
 * power of two (Megatron's make_vocab_size_divisible_by × TP), or the reverse. The multiple,
 * or 0.
 */
int64_t vocabPaddingMultiple(int64_t stored, int64_t want);

} // namespace shardscope::detail
