// SPDX-License-Identifier: MIT
#include "diff/namedcauses.h"

#include <array>
#include <unordered_map>
#include <unordered_set>

namespace shardscope::detail {

std::string KeyPrefix::storedName(std::string_view name) const
{
    if (stored)
        return prefix + std::string(name);
    return std::string(name.starts_with(prefix) ? name.substr(prefix.size()) : name);
}

std::optional<KeyPrefix> commonKeyPrefix(std::span<const std::string_view> stored,
                                         std::span<const std::string_view> wanted)
{
    const std::unordered_set<std::string_view> storedSet(stored.begin(), stored.end());
    const std::unordered_set<std::string_view> wantedSet(wanted.begin(), wanted.end());
    // Per prefix: how many names it maps (strip: a stored key minus it is a wanted name; add:
    // a wanted name minus it is a stored key). Only names not found as they are take part.
    std::unordered_map<std::string_view, size_t> strip, add;
    size_t missing = 0;
    for (std::string_view k : stored)
        if (!wantedSet.count(k))
            for (size_t dot = k.find('.'); dot != std::string_view::npos;
                 dot = k.find('.', dot + 1))
                if (wantedSet.count(k.substr(dot + 1)))
                    ++strip[k.substr(0, dot + 1)];
    for (std::string_view n : wanted) {
        if (storedSet.count(n))
            continue;
        ++missing;
        for (size_t dot = n.find('.'); dot != std::string_view::npos; dot = n.find('.', dot + 1))
            if (storedSet.count(n.substr(dot + 1)))
                ++add[n.substr(0, dot + 1)];
    }
    std::optional<KeyPrefix> best;
    auto consider = [&](const std::unordered_map<std::string_view, size_t> &counts, bool onStored) {
        for (const auto &[p, n] : counts)
            if (!best || n > best->matches || (n == best->matches && p < best->prefix))
                best = KeyPrefix{std::string(p), onStored, n};
    };
    consider(strip, true);
    consider(add, false);
    if (!best || missing == 0 || best->matches * 2 < missing)
        return std::nullopt;
    return best;
}

std::vector<std::string> tiedEmbeddingsOf(std::string_view name)
{
    // Output layer → the embeddings models tie it to (Hugging Face, Megatron, torchtitan/Llama).
    static const std::array<std::pair<std::string_view, std::array<std::string_view, 3>>, 3>
        kHeads = {{
            {"lm_head.weight", {"model.embed_tokens.weight", "transformer.wte.weight", ""}},
            {"output_layer.weight", {"embedding.word_embeddings.weight", "", ""}},
            {"output.weight", {"tok_embeddings.weight", "", ""}},
        }};
    for (const auto &[head, embeddings] : kHeads) {
        if (!name.ends_with(head) ||
            (name.size() > head.size() && name[name.size() - head.size() - 1] != '.'))
            continue;
        const std::string_view outer = name.substr(0, name.size() - head.size());
        std::vector<std::string> out;
        for (std::string_view e : embeddings)
            if (!e.empty())
                out.push_back(std::string(outer) + std::string(e));
        return out;
    }
    return {};
}

std::string recomputedBufferNote(std::string_view key)
{
    struct Buffer
    {
        std::string_view suffix, what;
    };
    static constexpr std::array kBuffers = {
        Buffer{".inv_freq", "rotary embedding frequencies"},
        Buffer{".position_ids", "position ids"},
        Buffer{".masked_bias", "an attention mask constant"},
        Buffer{".attn.bias", "a causal attention mask"},
        Buffer{"._float_tensor", "a placeholder tensor"},
    };
    for (const Buffer &b : kBuffers)
        if (key.ends_with(b.suffix))
            return std::string("a buffer the model recomputes at init (") + std::string(b.what) +
                   "), saved by an older version of its code: harmless to leave out; a strict "
                   "load_state_dict raises Unexpected key(s) on it, so drop it (shardscope-cli "
                   "fix does) or load with strict=False";
    return {};
}

int64_t vocabPaddingMultiple(int64_t stored, int64_t want)
{
    const int64_t big = std::max(stored, want), small = std::min(stored, want);
    if (small <= 0 || big == small)
        return 0;
    const int64_t m = big & -big; // the largest power of two dividing the padded size
    return m >= 8 && big - small < m ? m : 0;
}

} // namespace shardscope::detail
