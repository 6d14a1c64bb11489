// SPDX-License-Identifier: MIT
// Layouts generated from a model config, without building the model. Parameter names and shapes
// follow Megatron's TE layer specs (docs/formats.md §7); fusions follow its fsdp_dtensor handlers
// (§6).
#include "shardscope/layout.h"

#include "common/regularfile.h"
#include "layout/megatronargs.h"

#include <filesystem>

namespace shardscope {

using detail::argsOfCheckpoint;
using detail::fromHuggingFace;
using detail::fromMegatronArgs;
using detail::isMegatronArgs;
using detail::kMaxConfigBytes;
using detail::ModelSpec;
using detail::num;
using detail::parseFlags;
using detail::released016;
using detail::savedParallel;
using nlohmann::json;

namespace {

Result<Layout> layoutFromConfigUnguarded(const std::string &path, const LayoutOptions &options)
{
    std::error_code ec;
    const bool checkpoint = std::filesystem::is_directory(path, ec) || path.ends_with(".pt");
    if (checkpoint) {
        auto args = argsOfCheckpoint(path);
        if (!args)
            return args.error();
        auto spec = fromMegatronArgs(*args, path);
        if (!spec)
            return spec.error();
        LayoutOptions o = options;
        const bool fsdp = args->value("ckpt_format", std::string()) == "fsdp_dtensor";
        if (!o.dtype && !fsdp)
            o.dtype = num<int>(*args, "bf16", 0)   ? "bfloat16"
                      : num<int>(*args, "fp16", 0) ? "float16"
                                                   : "float32";
        Layout l;
        l.family = spec->family;
        l.source = path;
        l.parallel = options.parallelGiven ? options.parallel : savedParallel(*args, options);
        o.parallel = l.parallel;
        l.numExperts = int(spec->experts);
        l.transformerEngine = spec->transformerEngine;
        l.linearExtraState = true; // Megatron's linears keep one, TE or not
        auto old = released016(options.megatronVersion, path);
        if (!old)
            return old.error();
        detail::buildParameters(*spec, o, l, *old);
        return l;
    }
    auto read = detail::readRegularFile(path, kMaxConfigBytes);
    if (!read)
        return read.error();
    const std::string &text = *read;
    json c = json::parse(text, nullptr, false);
    bool flags = false;
    if (c.is_discarded()) {
        try {
            c = parseFlags(text);
        } catch (...) {
            return makeError(Error::Code::Format, "neither JSON nor --flag value text")
                .inFile(path);
        }
        flags = true;
    }
    if (!c.is_object())
        return makeError(Error::Code::Format, "config is not a JSON object").inFile(path);
    // Megatron checkpoints keep their arguments as {"args": {...}} in some exports.
    if (c.contains("args") && c["args"].is_object())
        c = c["args"];
    const bool megatron = flags || isMegatronArgs(c);
    Result<ModelSpec> spec = megatron ? fromMegatronArgs(c, path) : fromHuggingFace(c, path);
    if (!spec)
        return spec.error();
    Layout l;
    l.family = spec->family;
    l.source = path;
    l.parallel = megatron && !options.parallelGiven ? savedParallel(c, options) : options.parallel;
    l.numExperts = int(spec->experts);
    l.expertsGlobal = !(options.localExperts && l.parallel.ep > 1);
    l.transformerEngine = spec->transformerEngine;
    l.linearExtraState = true; // Megatron's linears keep one, TE or not
    if (l.parallel.ep > 1 && spec->experts % l.parallel.ep != 0)
        return makeError(Error::Code::Format, "--ep " + std::to_string(l.parallel.ep) +
                                                  " does not divide the " +
                                                  std::to_string(spec->experts) + " experts")
            .inFile(path);
    if (l.parallel.tp > 1 && spec->groups % l.parallel.tp != 0 && !spec->mla && spec->groups > 0)
        return makeError(Error::Code::Format, "--tp " + std::to_string(l.parallel.tp) +
                                                  " does not divide the " +
                                                  std::to_string(spec->groups) + " query groups")
            .inFile(path);
    LayoutOptions o = options;
    o.parallel = l.parallel;
    auto old = released016(options.megatronVersion, path);
    if (!old)
        return old.error();
    detail::buildParameters(*spec, o, l, *old);
    return l;
}

} // namespace

Result<Layout> layoutFromConfig(const std::string &path, const LayoutOptions &options)
{
    // The readers check what they take; this is the boundary's guarantee that a config no
    // check foresaw is an error, never an exception (found by fuzz/config_fuzzer.cpp).
    try {
        return layoutFromConfigUnguarded(path, options);
    } catch (const std::exception &e) {
        return makeError(Error::Code::Format, std::string("unreadable config: ") + e.what())
            .inFile(path);
    }
}

} // namespace shardscope
