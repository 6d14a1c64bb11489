// SPDX-License-Identifier: MIT
#include "layout/modelspec.h"

namespace shardscope::detail {

using nlohmann::json;

std::string text(const json &j, const char *key, std::string fallback)
{
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// What a model of any size has. Beyond these a config lies: its layout would take memory
// without bound (a parameter per layer and expert) or overflow a shape.
Status checkSize(const ModelSpec &m, const std::string &origin)
{
    struct Bound
    {
        const char *name;
        int64_t value, max;
    };
    constexpr int64_t dim = int64_t(1) << 22, count = int64_t(1) << 16;
    const Bound bounds[] = {
        {"layers", m.layers, 10'000},
        {"hidden size", m.hidden, dim},
        {"attention heads", m.heads, count},
        {"query groups", m.groups, count},
        {"head size", m.headDim, count},
        {"FFN size", m.ffn, dim},
        {"vocabulary", m.vocab, dim * 4},
        {"positions", m.positions, dim * 4},
        {"experts", m.experts, count},
        {"expert FFN size", m.moeFfn, dim},
        {"shared expert FFN", m.sharedFfn, dim},
        {"MTP layers", m.mtpLayers, 1'000},
        {"q LoRA rank", m.qLora, dim},
        {"KV LoRA rank", m.kvLora, dim},
        {"qk nope head size", m.qkNope, count},
        {"qk rope head size", m.qkRope, count},
        {"v head size", m.vHead, count},
        {"linear key heads", m.linKeyHeads, count},
        {"linear key size", m.linKeyDim, count},
        {"linear value heads", m.linValueHeads, count},
        {"linear value size", m.linValueDim, count},
        {"conv kernel", m.convKernel, count},
    };
    for (const Bound &b : bounds)
        if (b.value < 0 || b.value > b.max)
            return makeError(Error::Code::Limit,
                             std::string(b.name) + " " + std::to_string(b.value) +
                                 (b.value >= kSaturate ? " or more" : "") + " is not in [0, " +
                                 std::to_string(b.max) + "]")
                .inFile(origin);
    if (m.layers * std::max<int64_t>(1, m.experts) > 10'000'000)
        return makeError(Error::Code::Limit, std::to_string(m.layers) + " layers of " +
                                                 std::to_string(m.experts) +
                                                 " experts: over ten million parameters")
            .inFile(origin);
    return Ok{};
}

} // namespace shardscope::detail
