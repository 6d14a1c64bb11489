// SPDX-License-Identifier: MIT
// The rules' name mapping (rules.cpp lists the rules): the keys a loader with given rules asks
// for, and the other spellings that only ShardScope maps.
#include "diff/rulemap.h"

#include <algorithm>
#include <regex>

namespace shardscope::detail {

std::string replaceAll(std::string s, const std::string &from, const std::string &to)
{
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
        s.replace(p, from.size(), to);
    return s;
}

// A name with its expert index changed (grouped `linear_fcN.weight<e>…` or sequential
// `local_experts.<e>.`), as handle_experts_in_state_dict renumbers local → global.
std::string withExpert(const std::string &name, int to)
{
    static const std::regex grouped(R"(\.mlp\.experts\.linear_fc[12]\.(?:weight|bias)(\d+))");
    static const std::regex sequential(R"(\.mlp\.experts\.local_experts\.(\d+)\.)");
    std::smatch m;
    for (const std::regex *re : {&grouped, &sequential})
        if (std::regex_search(name, m, *re)) // splice: "$1" + digits would read as $12…
            return name.substr(0, size_t(m.position(1))) + std::to_string(to) +
                   name.substr(size_t(m.position(1) + m.length(1)));
    return name;
}

// Megatron's handler (or flag) behind each loader rule, for the fixes we suggest.
std::string handlerOf(const std::string &rule)
{
    if (rule == "swiglu")
        return "handle_swiglu_in_state_dict (runs only with --swiglu)";
    if (rule == "mla_down_proj")
        return "handle_mla_down_proj_in_state_dict (Megatron-LM #6271)";
    if (rule == "gdn")
        return "handle_gdn_in_state_dict (wired into preprocess_fsdp_dtensor_state_dict by the "
               "Megatron-Bridge fix)";
    if (rule == "mtp")
        return "handle_mtp_in_state_dict (Megatron-LM #6271)";
    if (rule == "extra_state")
        return "handle_fp8_extra_state_case";
    if (rule == "wrapper_prefix")
        return "the model.module. / optimizer.state.module.module.module. wrapper names";
    return rule;
}

// What the loader asks for, given which rules it has (docs/formats.md §6.1 order).
// Megatron's MLA handler moves the fused down projection's norm to input_layernorm, and no
// other norm: an `absorbs` elsewhere in a layout maps nothing.
bool absorbedByMlaHandler(const std::string &name)
{
    return name.ends_with(".linear_qkv_down_proj.layer_norm_weight") ||
           name.ends_with(".linear_qkv_down_proj.layer_norm_bias");
}

Request loaderRequest(const LayoutParam &p, const Layout &layout, bool swigluStaysFused,
                      const std::function<bool(const std::string &)> &on)
{
    Request q;
    // torch_dist keeps SwiGLU's [W; V] in one key (unless saved with singleton shards).
    const bool split =
        p.fusion && on(p.fusion->rule) && !(swigluStaysFused && p.fusion->rule == "swiglu");
    if (split) {
        const Fusion &f = *p.fusion;
        const int64_t tp = f.tpLocal ? layout.parallel.tp : 1;
        int64_t at = 0;
        for (const FusedSection &s : f.sections) {
            Piece piece{s.name, p.shape, f.dim, at, at + s.size / tp};
            piece.shape[size_t(f.dim)] = s.size / tp;
            at += s.size / tp;
            q.pieces.push_back(std::move(piece));
        }
        q.rules.push_back(f.rule);
        q.split = true;
    } else if (!p.absorbs.empty() && absorbedByMlaHandler(p.name) && on("mla_down_proj")) {
        q.pieces.push_back({p.absorbs, p.shape, 0, 0, 0});
        q.rules.push_back("mla_down_proj");
        q.renamed = true;
    } else {
        q.pieces.push_back({p.name, p.shape, 0, 0, 0});
    }
    const std::string inner = "." + layout.mtpInner + ".";
    if (layout.mtpInner != "transformer_layer" && on("mtp"))
        for (Piece &piece : q.pieces)
            if (piece.name.find(inner) != std::string::npos) {
                piece.name = replaceAll(piece.name, inner, ".transformer_layer.");
                if (std::find(q.rules.begin(), q.rules.end(), "mtp") == q.rules.end())
                    q.rules.push_back("mtp");
                q.renamed = true;
            }
    return q;
}

std::string mtpSpelledName(const std::string &name, const std::string &mtpInner)
{
    return replaceAll(name, ".transformer_layer.", "." + mtpInner + ".");
}

std::string otherExpertForm(const std::string &n)
{
    static const std::regex grouped(R"(\.mlp\.experts\.linear_fc([12])\.(weight|bias)(\d+))");
    static const std::regex sequential(
        R"(\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.(weight|bias))");
    std::smatch m;
    if (std::regex_search(n, m, grouped))
        return m.prefix().str() + ".mlp.experts.local_experts." + m[3].str() + ".linear_fc" +
               m[1].str() + "." + m[2].str() + m.suffix().str();
    if (std::regex_search(n, m, sequential))
        return m.prefix().str() + ".mlp.experts.linear_fc" + m[2].str() + "." + m[3].str() +
               m[1].str() + m.suffix().str();
    return n;
}

} // namespace shardscope::detail
