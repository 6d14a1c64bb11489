// SPDX-License-Identifier: MIT
// The rules' name mapping: what a model's parameter is called on disk under each rule.
#pragma once

#include "shardscope/layout.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardscope::detail {

std::string replaceAll(std::string s, const std::string &from, const std::string &to);
/**
 * A name with its expert index changed (grouped `linear_fcN.weight<e>…` or sequential
 * `local_experts.<e>.`), as handle_experts_in_state_dict renumbers local → global.
 */
std::string withExpert(const std::string &name, int to);
/** Megatron's handler (or flag) behind each loader rule, for the fixes we suggest. */
std::string handlerOf(const std::string &rule);

// One on-disk tensor a parameter maps to: its name in the model's terms and the rows it fills.
struct Piece
{
    std::string name;
    std::vector<int64_t> shape;
    int dim = 0;
    int64_t begin = 0, end = 0;
};

struct Request
{
    std::vector<Piece> pieces;
    std::vector<std::string> rules;
    bool split = false, renamed = false;
};

/**
 * The keys a loader asks for a parameter, given which rules it applies (`on`): fused sections
 * split (swiglu, mla_down_proj, gdn; torch_dist keeps SwiGLU's [W; V] whole unless
 * `swigluStaysFused` is false), an absorbed norm renamed (mla_down_proj), MTP's inner layer
 * renamed (mtp).
 */
/** Whether Megatron's MLA handler maps this absorbed norm to its `absorbs` name. */
bool absorbedByMlaHandler(const std::string &name);

Request loaderRequest(const LayoutParam &p, const Layout &layout, bool swigluStaysFused,
                      const std::function<bool(const std::string &)> &on);

/** mtp_spelling: the on-disk name of a checkpoint that spells MTP's inner layer `mtpInner`. */
std::string mtpSpelledName(const std::string &name, const std::string &mtpInner);
/** experts_form: grouped `linear_fcN.weight<e>` ↔ sequential `local_experts.<e>.linear_fcN.weight`.
 */
std::string otherExpertForm(const std::string &name);

} // namespace shardscope::detail
