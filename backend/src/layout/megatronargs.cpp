// SPDX-License-Identifier: MIT
// Megatron's arguments (megatron/training/arguments.py's argparse names) → the model, from a
// checkpoint's saved `args`, an args file or a command line.
#include "layout/megatronargs.h"

#include "shardscope/checkpoint.h"

#include <cctype>
#include <sstream>

namespace shardscope::detail {

using nlohmann::json;

bool isMegatronArgs(const json &j)
{
    return j.contains("num_layers") || j.contains("ffn_hidden_size") || j.contains("swiglu");
}

// Megatron's argparse names (megatron/training/arguments.py).
// A Python list expression as Megatron's --moe-layer-freq takes it: "[0]*3+[1]*58",
// "([1]*2)", "[1,0,1]"; nullopt when the text is anything else.
std::optional<std::vector<int>> intListExpression(std::string text)
{
    std::erase_if(text, [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
    while (text.size() >= 2 && text.front() == '(' && text.back() == ')')
        text = text.substr(1, text.size() - 2);
    std::vector<int> out;
    size_t at = 0;
    while (at < text.size()) {
        if (text[at] != '[')
            return std::nullopt;
        const size_t close = text.find(']', at);
        if (close == std::string::npos)
            return std::nullopt;
        std::vector<int> items;
        std::string body = text.substr(at + 1, close - at - 1);
        for (size_t b = 0; b < body.size();) {
            size_t e = body.find(',', b);
            if (e == std::string::npos)
                e = body.size();
            const std::string item = body.substr(b, e - b);
            if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
                return std::nullopt;
            items.push_back(std::stoi(item));
            b = e + 1;
        }
        at = close + 1;
        int64_t repeat = 1;
        if (at < text.size() && text[at] == '*') {
            const size_t end = text.find_first_not_of("0123456789", at + 1);
            const std::string n =
                text.substr(at + 1, end == std::string::npos ? end : end - at - 1);
            if (n.empty() || n.size() > 6)
                return std::nullopt;
            repeat = std::stoll(n);
            at = end == std::string::npos ? text.size() : end;
        }
        for (int64_t r = 0; r < repeat; ++r)
            out.insert(out.end(), items.begin(), items.end());
        if (at < text.size()) {
            if (text[at] != '+')
                return std::nullopt;
            ++at;
        }
    }
    return out.empty() ? std::nullopt : std::optional(out);
}

Result<ModelSpec> fromMegatronArgs(const json &a, const std::string &origin)
{
    ModelSpec m;
    m.hidden = num<int64_t>(a, "hidden_size", 0);
    m.layers = num<int64_t>(a, "num_layers", 0);
    m.heads = num<int64_t>(a, "num_attention_heads", 0);
    m.groups = num<int>(a, "group_query_attention", 0)
                   ? num<int64_t>(a, "num_query_groups", m.heads)
                   : m.heads;
    m.headDim = num<int64_t>(a, "kv_channels", m.heads ? m.hidden / m.heads : 0);
    m.ffn = num<int64_t>(a, "ffn_hidden_size", 4 * m.hidden);
    m.vocab = num<int64_t>(a, "padded_vocab_size", 0);
    if (m.vocab <= 0) { // _vocab_size_with_padding: a multiple of divisible_by × TP
        const int64_t multiple =
            std::max<int64_t>(1, num<int64_t>(a, "make_vocab_size_divisible_by", 128)) *
            std::max<int64_t>(1, num<int64_t>(a, "tensor_model_parallel_size", 1));
        const int64_t vocab = num<int64_t>(a, "vocab_size", 0);
        m.vocab = (vocab + multiple - 1) / multiple * multiple;
    }
    m.tied = num<int>(a, "untie_embeddings_and_output_weights", 0) == 0;
    m.gated = num<int>(a, "swiglu", 0) != 0;
    m.qkNorm = num<int>(a, "qk_layernorm", 0) != 0;
    m.transformerEngine = text(a, "transformer_impl", "transformer_engine") != "local";
    // Argparse dests, and the flags' own names as `--flag` text gives them.
    m.linearBias = num<int>(a, "add_bias_linear", !num<int>(a, "disable_bias_linear", 0)) != 0;
    m.qkvBias = m.linearBias || num<int>(a, "add_qkv_bias", 0) != 0; // validate_args syncs them
    const std::string normalization = text(a, "normalization", "LayerNorm");
    if (normalization != "LayerNorm" && normalization != "RMSNorm")
        return makeError(Error::Code::Format,
                         "key 'normalization': '" + normalization + "' (LayerNorm or RMSNorm)")
            .inFile(origin);
    m.normBias = normalization == "LayerNorm";
    const bool rotary = num<int>(a, "use_rotary_position_embeddings", 0) != 0;
    const std::string positions =
        text(a, "position_embedding_type", rotary ? "rope" : "learned_absolute");
    const bool addPositions =
        num<int>(a, "add_position_embedding", !num<int>(a, "no_position_embedding", 0)) != 0;
    if (positions == "learned_absolute" && addPositions) {
        m.positions = num<int64_t>(a, "max_position_embeddings", num<int64_t>(a, "seq_length", 0));
        if (m.positions <= 0)
            return makeError(Error::Code::Format,
                             "key 'max_position_embeddings': learned absolute positions need it")
                .inFile(origin);
    }
    m.sequentialExperts = num<int>(a, "moe_grouped_gemm", 0) == 0;
    if (!m.transformerEngine && !m.sequentialExperts && num<int64_t>(a, "num_experts", 0) > 0)
        return makeError(Error::Code::Format,
                         "key 'moe_grouped_gemm': the local spec builds the legacy GroupedMLP "
                         "(experts.weight1/weight2), which layouts do not model")
            .inFile(origin);
    m.mlaFusion = num<int>(a, "mla_down_proj_fusion", 0) != 0;
    if (m.hidden <= 0 || m.layers <= 0 || m.vocab <= 0)
        return makeError(Error::Code::Format,
                         "arguments lack hidden_size, num_layers or padded_vocab_size")
            .inFile(origin);
    m.family = "megatron";
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    m.moeLayer.assign(size_t(m.layers), false);
    m.gdnLayer.assign(size_t(m.layers), false);
    m.experts = num<int64_t>(a, "num_experts", 0);
    m.moeFfn = num<int64_t>(a, "moe_ffn_hidden_size", m.ffn);
    m.sharedFfn = num<int64_t>(a, "moe_shared_expert_intermediate_size", 0);
    m.sharedGate = num<int>(a, "moe_shared_expert_gate", 0) != 0;
    m.expertBias = num<int>(a, "moe_router_enable_expert_bias", 0) != 0;
    if (m.experts > 0) {
        auto it = a.find("moe_layer_freq");
        std::optional<std::vector<int>> pattern;
        if (it != a.end() && it->is_string() &&
            it->get<std::string>().find('[') != std::string::npos) {
            // Megatron's moe_freq_type evaluates the text as Python: "([0]*3+[1]*58)".
            pattern = intListExpression(it->get<std::string>());
            if (!pattern)
                return makeError(Error::Code::Format,
                                 "key 'moe_layer_freq': cannot read '" + it->get<std::string>() +
                                     "' (an int, a list, or a sum of [..]*n terms)")
                    .inFile(origin);
        } else if (it != a.end() && it->is_array()) {
            pattern = std::vector<int>();
            for (const json &v : *it)
                pattern->push_back(v.is_number() ? v.get<int>() : 0);
        }
        if (pattern)
            m.perLayerKeys = "moe_layer_freq is a list";
        else if (num<int64_t>(a, "moe_layer_freq", 1) > 1)
            m.perLayerKeys = "moe_layer_freq > 1";
        if (pattern) {
            if (pattern->size() != size_t(m.layers))
                return makeError(Error::Code::Format,
                                 "key 'moe_layer_freq': " + std::to_string(pattern->size()) +
                                     " entries for " + std::to_string(m.layers) + " layers")
                    .inFile(origin);
            for (size_t i = 0; i < pattern->size(); ++i)
                m.moeLayer[i] = (*pattern)[i] != 0;
        } else {
            const int64_t freq = num<int64_t>(a, "moe_layer_freq", 1);
            for (int64_t i = 0; i < m.layers; ++i)
                m.moeLayer[size_t(i)] = freq > 0 && i % freq == 0;
        }
    }
    if (num<int>(a, "multi_latent_attention", 0)) {
        m.mla = true;
        m.family = "megatron_mla";
        m.qLora = num<int64_t>(a, "q_lora_rank", 0);
        m.kvLora = num<int64_t>(a, "kv_lora_rank", 32); // arguments.py's defaults
        m.qkNope = num<int64_t>(a, "qk_head_dim", 128);
        m.qkRope = num<int64_t>(a, "qk_pos_emb_head_dim", 64);
        m.vHead = num<int64_t>(a, "v_head_dim", 128);
    }
    m.mtpLayers = num<int64_t>(a, "mtp_num_layers", 0);
    // The rest of what makes TransformerBlock.sharded_state_dict non-homogeneous.
    if (const auto it = a.find("linear_attention_freq");
        it != a.end() && (it->is_array() || (it->is_string() && it->get<std::string>().find('[') !=
                                                                    std::string::npos)))
        m.perLayerKeys = "linear_attention_freq is a list";
    else if (num<int64_t>(a, "linear_attention_freq", 1) > 1)
        m.perLayerKeys = "linear_attention_freq > 1";
    if (num<int>(a, "hetereogenous_dist_checkpoint", 0) != 0)
        m.perLayerKeys = "--hetereogenous-dist-checkpoint";
    if (!text(a, "heterogeneous_layers_config_path", "").empty() ||
        !text(a, "heterogeneous_layers_config_encoded_json", "").empty())
        m.perLayerKeys = "heterogeneous block specs (--heterogeneous-layers-config-path)";
    if (Status st = checkSize(m, origin); !st)
        return st.error();
    return m;
}

// `--flag value` text (a Megatron command line or args file) → JSON of argparse names.
json parseFlags(const std::string &text)
{
    json j = json::object();
    std::istringstream in(text);
    std::vector<std::string> words;
    for (std::string w; in >> w;)
        if (w != "\\")
            words.push_back(w);
    for (size_t i = 0; i < words.size(); ++i) {
        if (!words[i].starts_with("--"))
            continue;
        std::string name = words[i].substr(2);
        std::replace(name.begin(), name.end(), '-', '_');
        if (i + 1 < words.size() && !words[i + 1].starts_with("--")) {
            std::vector<std::string> values;
            while (i + 1 < words.size() && !words[i + 1].starts_with("--"))
                values.push_back(words[++i]);
            if (values.size() == 1) {
                j[name] = values[0];
            } else {
                json arr = json::array();
                for (const auto &v : values)
                    arr.push_back(std::stoll(v));
                j[name] = arr;
            }
        } else {
            j[name] = true;
        }
    }
    return j;
}

// A Megatron args Namespace (a checkpoint's `args` entry) → JSON of its plain fields.
namespace {

json argsToJson(const PyValue &args)
{
    json j = json::object();
    const PyValue *state = args.kind == PyValue::Kind::Object && args.items.size() > 1
                               ? &args.items[1]
                               : (args.kind == PyValue::Kind::Dict ? &args : nullptr);
    if (!state || state->kind != PyValue::Kind::Dict)
        return j;
    for (const auto &[k, v] : state->dict) {
        if (k.kind != PyValue::Kind::Str)
            continue;
        switch (v.kind) {
        case PyValue::Kind::Bool:
            j[k.text] = v.boolean;
            break;
        case PyValue::Kind::Int:
            j[k.text] = v.integer;
            break;
        case PyValue::Kind::Float:
            j[k.text] = v.real;
            break;
        case PyValue::Kind::Str:
            j[k.text] = v.text;
            break;
        case PyValue::Kind::List:
        case PyValue::Kind::Tuple: {
            json a = json::array();
            for (const PyValue &e : v.items)
                if (e.kind == PyValue::Kind::Int || e.kind == PyValue::Kind::Bool)
                    a.push_back(e.kind == PyValue::Kind::Int ? e.integer : int64_t(e.boolean));
            j[k.text] = a;
            break;
        }
        default:
            break;
        }
    }
    return j;
}

} // namespace

// The arguments a Megatron checkpoint was saved with: its `args` entry (DCP BYTE_IO, common.pt
// or a legacy model_optim_rng.pt).
Result<json> argsOfCheckpoint(const std::string &path)
{
    auto index = openCheckpoint(path);
    if (!index)
        return index.error();
    for (const ObjectEntry &o : index->objects) {
        if (o.key != "args" && !o.key.ends_with("/args"))
            continue;
        auto value = readObject(*index, o);
        if (!value)
            return value.error();
        json j = argsToJson(*value);
        if (j.empty())
            return makeError(Error::Code::Format, "args is not an argparse.Namespace")
                .inFile(path)
                .atKey(o.key.str());
        return j;
    }
    return makeError(Error::Code::NotFound,
                     "the checkpoint has no args entry to generate a layout from")
        .inFile(path);
}

// Whether a --megatron-version names a release up to 0.16 (no MLA down-projection fusion, no
// fused query norm); "main" is the development branch after it.
Result<bool> released016(const std::string &version, const std::string &origin)
{
    if (version == "main")
        return false;
    int major = 0, minor = 0;
    char dot = 0;
    std::istringstream in(version);
    if (!(in >> major >> dot >> minor) || dot != '.' || major < 0 || minor < 0)
        return makeError(Error::Code::Unsupported,
                         "--megatron-version '" + version + "': a release (0.16, 0.15.2) or 'main'")
            .inFile(origin);
    return major == 0 && minor <= 16;
}

// The parallel sizes a Megatron argument set was run with (what a resume plans for, and what a
// legacy checkpoint's rank files are cut by); the options' where the arguments are silent.
ParallelConfig savedParallel(const json &a, const LayoutOptions &options)
{
    ParallelConfig p = options.parallel;
    p.tp = num<int>(a, "tensor_model_parallel_size", p.tp);
    p.pp = num<int>(a, "pipeline_model_parallel_size", p.pp);
    p.ep = num<int>(a, "expert_model_parallel_size", p.ep);
    p.etp = num<int>(a, "expert_tensor_parallel_size", p.tp);
    p.firstStageLayers = num<int>(a, "decoder_first_pipeline_num_layers", p.firstStageLayers);
    p.lastStageLayers = num<int>(a, "decoder_last_pipeline_num_layers", p.lastStageLayers);
    for (int *v : {&p.tp, &p.pp, &p.ep, &p.etp})
        *v = std::max(1, *v);
    return p;
}

} // namespace shardscope::detail
