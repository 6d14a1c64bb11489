#!/usr/bin/env python3
"""Write small Megatron-FSDP ``fsdp_dtensor``-style checkpoints of three model families, with and
without Megatron's fused-parameter handlers, for testing layouts and ``diff --layout``.

    python tools/make_layout_fixtures.py --out DIR [--list]

Layout written::

    DIR/llama/config.json              HF Llama config (GQA, explicit head_dim != H / heads)
    DIR/llama/{unfused,fused}/         plain DCP directories (.metadata, __0_0.distcp)
    DIR/deepseek_v3/config.json        HF DeepSeek-V3 config (MLA, MoE, expert bias, 1 MTP layer)
    DIR/deepseek_v3/{unfused,fused,sequential}/
    DIR/qwen3_next/config.json         HF Qwen3-Next config (3 GDN layers + 1 gated attention, MoE)
    DIR/qwen3_next/{unfused,fused,bridge,bridge_tp2,gdn_fused}/
    DIR/MANIFEST.json                  what each directory holds, the live model's parameters
    DIR/.complete                      hash of this script + torch version, written last

Every checkpoint is written by real torch (``torch.distributed.checkpoint.save`` with
``no_dist=True``, so one rank and one data file) from the state dict Megatron's
``generate_state_dict`` hands to DCP (see docs/formats.md §5.4, §6, §7)::

    {"model": {"module.<FQN>": tensor, ...},
     "optimizer": {"state": {"module.module.module.<FQN>": {"exp_avg", "exp_avg_sq", "step"}}},
     "args": argparse.Namespace(...), "checkpoint_version": 3.0, "iteration": 20}

which DCP flattens to ``model.module.<FQN>`` and
``optimizer.state.module.module.module.<FQN>.exp_avg`` keys. The *live* model is always the fused
Megatron/TE one (SwiGLU ``linear_fc1.weight`` = ``[W; V]``, FusedMLA ``linear_qkv_down_proj`` with
the input norm absorbed as ``layer_norm_weight``, TE grouped experts ``weight<e>``, MTP inner layer
``mtp_model_layer``, GDN ``in_proj`` / ``conv1d`` holding ``[q, k, v, z, beta, alpha]``). Variants:

* ``unfused``: what Megatron-FSDP writes after its handlers (§6.4-6.8): ``…linear_fc1.weight_w`` /
  ``_v``, ``linear_q_down_proj`` / ``linear_kv_down_proj``, the absorbed norm as
  ``input_layernorm.weight``, global expert indices, MTP as ``transformer_layer``, GDN
  ``in_proj.weight.query`` … ``.alpha`` and ``conv1d.weight.query`` / ``.key`` / ``.value``.
* ``fused``: the same model without the handlers (older Megatron, or names as torch_dist keeps
  them): fused tensors under the live names, MTP as ``mtp_model_layer``. Each fused tensor is
  exactly ``torch.cat`` (dim 0, section order) of the matching ``unfused`` tensors (TP = 1, so no
  interleaving), for model tensors and for ``exp_avg`` / ``exp_avg_sq`` alike.
* ``qwen3_next/bridge``: ``unfused`` names, model section only (Megatron-Bridge conversions carry no
  ``args`` / ``iteration`` / ``checkpoint_version`` and no optimizer).
* ``qwen3_next/bridge_tp2``: ``bridge``, but for a model built with TP = 2 whose GDN tensors Bridge
  wrote already TP-local (``split_gdn_fused`` sees ``shape[0] == sum(TP-local sections)`` and uses
  ``split_dtensor``): every ``…in_proj.weight.{query,key,value,z,beta,alpha}`` and
  ``…conv1d.weight.{query,key,value}`` has half its section's rows. Values: TP rank 0's rows, i.e.
  the first ``size / 2`` rows of the ``unfused`` section (Megatron's GDN ``in_proj`` / ``conv1d``
  are column-parallel over heads and each rank holds ``[q_r; k_r; v_r; z_r; beta_r; alpha_r]``, so
  rank 0's piece of every section is that section's leading half). Everything else is ``bridge``.
  Its MANIFEST entry lists the live ``in_proj.weight`` / ``conv1d.weight`` with their TP-local
  shapes and the fusions with the full (TP-unsharded) section sizes, plus ``"tp": 2`` and
  ``"gdn_tp_local": true``.
* ``qwen3_next/gdn_fused``: what training at Megatron-LM head writes (docs/formats.md §6.1:
  ``handle_gdn_in_state_dict`` is not wired): SwiGLU split into ``_w`` / ``_v``, MTP spelled as in
  ``unfused``, but GDN ``in_proj.weight`` / ``conv1d.weight`` fused under their live names (full
  shapes, TP = 1, so each is ``torch.cat`` of the ``unfused`` sections), optimizer state under the
  same names, ``args`` / ``iteration`` present. MANIFEST entry adds ``"gdn_fused_on_disk": true``.
* ``deepseek_v3/sequential``: ``unfused`` but with SequentialMLP experts
  (``mlp.experts.local_experts.<e>.linear_fc1.weight_w`` / ``_v``, ``….linear_fc2.weight``).

Values are seeded per *unfused* name (grouped-expert spelling, live MTP spelling), so all variants
of a family hold the same numbers and a verification can compare bits across them. Model tensors
are float32 (fp32 main params); ``step`` is a 0-d float32 tensor; the router ``expert_bias`` is a
persistent buffer (model section only, no optimizer state).

Names and shapes are computed here from the config (docs/formats.md §7), independently of the C++
layout generator, so the two can be checked against each other. After writing, every directory is
read back (metadata keys and shapes, full load compared bit for bit, fused == cat(unfused),
gdn_fused GDN == cat(unfused sections) and every other tensor == unfused, bridge_tp2 GDN sections ==
leading half of the unfused sections and every other model tensor == unfused).

Deterministic (``.distcp`` files are byte-identical across runs; ``.metadata`` differs only in
``storage_meta``) and idempotent: the set is built in a sibling temp dir and swapped into DIR.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from pathlib import Path

import torch

ITERATION = 20
SEED = 4242

# ---------------------------------------------------------------------------------------------
# Configs (Hugging Face config.json). Sizes are small and pairwise different where a mix-up
# would otherwise go unnoticed (q_lora != kv_lora + rope, head_dim != H / heads, …).
# ---------------------------------------------------------------------------------------------

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 2,
    "vocab_size": 64,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 48,
    "num_hidden_layers": 3,
    "num_attention_heads": 2,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 12,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
    "moe_layer_freq": 1,
    "moe_intermediate_size": 8,
    "intermediate_size": 40,
    "first_k_dense_replace": 1,
    "num_nextn_predict_layers": 1,
    "vocab_size": 96,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "attention_bias": False,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 40,
    "intermediate_size": 64,
    "num_hidden_layers": 4,
    "full_attention_interval": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "partial_rotary_factor": 0.25,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 8,
    "linear_num_value_heads": 4,
    "linear_value_head_dim": 12,
    "linear_conv_kernel_dim": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 8,
    "shared_expert_intermediate_size": 12,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "vocab_size": 80,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "attention_bias": False,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

CONFIGS = {"llama": LLAMA, "deepseek_v3": DEEPSEEK_V3, "qwen3_next": QWEN3_NEXT}
VARIANTS = {
    "llama": ["unfused", "fused"],
    "deepseek_v3": ["unfused", "fused", "sequential"],
    "qwen3_next": ["unfused", "fused", "bridge", "bridge_tp2", "gdn_fused"],
}
# Variants whose GDN tensors are TP-local for this TP size (everything else is TP-global).
GDN_TP_LOCAL = {"bridge_tp2": 2}


# ---------------------------------------------------------------------------------------------
# The live model: parameter names (fused Megatron/TE spelling), full shapes, TP dims, fusions
# ---------------------------------------------------------------------------------------------


@dataclass
class Section:
    name: str  # unfused name (live spelling: MTP inner layer is mtp_model_layer)
    size: int  # rows (dim 0)


@dataclass
class LiveParam:
    name: str
    shape: tuple
    tp_dim: int = -1  # §7.4
    buffer: bool = False  # persistent buffer: model section only, no optimizer state
    rule: str | None = None  # swiglu | mla_down_proj | gdn | absorb (a norm moved, not split)
    sections: list[Section] = field(default_factory=list)
    expert: int | None = None
    tp_local: int = 1  # > 1: shape and disk rows TP-local for this TP size; sections full

    def section_shape(self, s: Section) -> tuple:
        return (s.size, *self.shape[1:])


class LiveModel:
    def __init__(self, family: str, cfg: dict, sequential_experts: bool = False,
                 gdn_tp: int = 1):
        self.family = family
        self.cfg = cfg
        self.sequential = sequential_experts
        self.gdn_tp = gdn_tp  # > 1: GDN in_proj / conv1d are TP-local for this TP size
        self.params: list[LiveParam] = []

    def add(self, name, shape, tp_dim=-1, **kw) -> LiveParam:
        p = LiveParam(name, tuple(int(d) for d in shape), tp_dim, **kw)
        self.params.append(p)
        return p

    def fc1(self, name: str, ffn: int, hidden: int, expert: int | None = None) -> None:
        """SwiGLU fc1 = [W (gate); V (up)], split by handle_swiglu_in_state_dict (§6.4)."""
        self.add(name, (2 * ffn, hidden), 0, rule="swiglu", expert=expert,
                 sections=[Section(name + "_w", ffn), Section(name + "_v", ffn)])

    def dense_mlp(self, layer: str, hidden: int, ffn: int) -> None:
        self.add(f"{layer}.mlp.linear_fc1.layer_norm_weight", (hidden,))
        self.fc1(f"{layer}.mlp.linear_fc1.weight", ffn, hidden)
        self.add(f"{layer}.mlp.linear_fc2.weight", (hidden, ffn), 1)

    def moe_mlp(self, layer: str, hidden: int, experts: int, moe_ffn: int, shared_ffn: int,
                shared_gate: bool, expert_bias: bool) -> None:
        self.add(f"{layer}.pre_mlp_layernorm.weight", (hidden,))
        self.add(f"{layer}.mlp.router.weight", (experts, hidden))
        if expert_bias:
            self.add(f"{layer}.mlp.router.expert_bias", (experts,), buffer=True)
        ex = f"{layer}.mlp.experts"
        if self.sequential:
            for e in range(experts):
                self.fc1(f"{ex}.local_experts.{e}.linear_fc1.weight", moe_ffn, hidden, e)
                self.add(f"{ex}.local_experts.{e}.linear_fc2.weight", (hidden, moe_ffn), 1,
                         expert=e)
        else:  # TE grouped GEMM: all fc1 weights, then all fc2 weights
            for e in range(experts):
                self.fc1(f"{ex}.linear_fc1.weight{e}", moe_ffn, hidden, e)
            for e in range(experts):
                self.add(f"{ex}.linear_fc2.weight{e}", (hidden, moe_ffn), 1, expert=e)
        if shared_ffn:
            self.fc1(f"{layer}.mlp.shared_experts.linear_fc1.weight", shared_ffn, hidden)
            self.add(f"{layer}.mlp.shared_experts.linear_fc2.weight", (hidden, shared_ffn), 1)
            if shared_gate:
                self.add(f"{layer}.mlp.shared_experts.gate_weight", (1, hidden))

    def gqa_attention(self, layer: str, hidden: int, heads: int, groups: int, head_dim: int,
                      output_gate: bool = False, qk_norm: bool = False) -> None:
        """§7.1 / §7.3: rows = ng * ((1 + gate) * np/ng + 2) * hn."""
        att = f"{layer}.self_attention"
        per_group = heads // groups
        rows = groups * ((2 if output_gate else 1) * per_group + 2) * head_dim
        self.add(f"{att}.linear_qkv.layer_norm_weight", (hidden,))
        self.add(f"{att}.linear_qkv.weight", (rows, hidden), 0)
        if qk_norm:
            self.add(f"{att}.q_layernorm.weight", (head_dim,))
            self.add(f"{att}.k_layernorm.weight", (head_dim,))
        self.add(f"{att}.linear_proj.weight", (hidden, heads * head_dim), 1)

    def fused_mla(self, layer: str, c: dict) -> None:
        """§7.2 with mla_down_proj_fusion (FusedMLASelfAttention, §6.5)."""
        h, att = c["hidden_size"], f"{layer}.self_attention"
        np_, ql, kvl = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
        rope, nope, vh = c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        self.add(f"{att}.linear_qkv_down_proj.layer_norm_weight", (h,), rule="absorb",
                 sections=[Section(f"{layer}.input_layernorm.weight", h)])
        self.add(f"{att}.linear_qkv_down_proj.weight", (ql + kvl + rope, h), 0,
                 rule="mla_down_proj",
                 sections=[Section(f"{att}.linear_q_down_proj.weight", ql),
                           Section(f"{att}.linear_kv_down_proj.weight", kvl + rope)])
        self.add(f"{att}.linear_q_up_proj.layer_norm_weight", (ql,))
        self.add(f"{att}.linear_q_up_proj.weight", (np_ * (nope + rope), ql), 0)
        self.add(f"{att}.linear_kv_up_proj.layer_norm_weight", (kvl,))
        self.add(f"{att}.linear_kv_up_proj.weight", (np_ * (nope + vh), kvl), 0)
        self.add(f"{att}.linear_proj.weight", (h, np_ * vh), 1)

    def gdn(self, layer: str, c: dict) -> None:
        """§7.3 / §6.8 at TP = 1: in_proj rows [q, k, v, z, beta, alpha], conv1d rows [q, k, v].
        With gdn_tp > 1 the two fused shapes are TP-local (rows / gdn_tp); sections stay full."""
        h, att = c["hidden_size"], f"{layer}.self_attention"
        qk = c["linear_num_key_heads"] * c["linear_key_head_dim"]
        v = c["linear_num_value_heads"] * c["linear_value_head_dim"]
        nvh = c["linear_num_value_heads"]
        k = c["linear_conv_kernel_dim"]
        tp = self.gdn_tp
        if tp > 1:  # TP splits GDN by heads: whole key / value heads per rank
            assert c["linear_num_key_heads"] % tp == 0 and nvh % tp == 0, (c, tp)
            assert qk % tp == 0 and v % tp == 0, (c, tp)
        ip = f"{att}.in_proj.weight"
        cv = f"{att}.conv1d.weight"
        self.add(f"{att}.in_proj.layer_norm_weight", (h,))
        self.add(ip, ((2 * qk + 2 * v + 2 * nvh) // tp, h), 0, rule="gdn", tp_local=tp,
                 sections=[Section(f"{ip}.{n}", s) for n, s in
                           zip(("query", "key", "value", "z", "beta", "alpha"),
                               (qk, qk, v, v, nvh, nvh))])
        self.add(cv, ((2 * qk + v) // tp, 1, k), 0, rule="gdn", tp_local=tp,
                 sections=[Section(f"{cv}.{n}", s) for n, s in
                           zip(("query", "key", "value"), (qk, qk, v))])
        self.add(f"{att}.A_log", (nvh,), 0)
        self.add(f"{att}.dt_bias", (nvh,), 0)
        self.add(f"{att}.out_norm.weight", (c["linear_value_head_dim"],))
        self.add(f"{att}.out_proj.weight", (h, v), 1)


def llama_model(c: dict) -> LiveModel:
    m = LiveModel("llama", c)
    h = c["hidden_size"]
    m.add("embedding.word_embeddings.weight", (c["vocab_size"], h), 0)
    for i in range(c["num_hidden_layers"]):
        layer = f"decoder.layers.{i}"
        m.gqa_attention(layer, h, c["num_attention_heads"], c["num_key_value_heads"],
                        c.get("head_dim", h // c["num_attention_heads"]))
        m.dense_mlp(layer, h, c["intermediate_size"])
    m.add("decoder.final_layernorm.weight", (h,))
    m.add("output_layer.weight", (c["vocab_size"], h), 0)
    return m


def deepseek_v3_model(c: dict, sequential: bool = False) -> LiveModel:
    m = LiveModel("deepseek_v3", c, sequential)
    h = c["hidden_size"]
    moe = dict(hidden=h, experts=c["n_routed_experts"], moe_ffn=c["moe_intermediate_size"],
               shared_ffn=c["moe_intermediate_size"] * c["n_shared_experts"], shared_gate=False,
               expert_bias=True)
    m.add("embedding.word_embeddings.weight", (c["vocab_size"], h), 0)
    for i in range(c["num_hidden_layers"]):
        layer = f"decoder.layers.{i}"
        m.fused_mla(layer, c)
        if i < c["first_k_dense_replace"]:
            m.dense_mlp(layer, h, c["intermediate_size"])
        else:
            m.moe_mlp(layer, **moe)
    m.add("decoder.final_layernorm.weight", (h,))
    for k in range(c["num_nextn_predict_layers"]):
        mp = f"mtp.layers.{k}"
        m.add(f"{mp}.enorm.weight", (h,))
        m.add(f"{mp}.hnorm.weight", (h,))
        m.add(f"{mp}.eh_proj.weight", (h, 2 * h), 0)
        m.fused_mla(f"{mp}.mtp_model_layer", c)  # DeepSeek's MTP layer is an MLA + MoE layer
        m.moe_mlp(f"{mp}.mtp_model_layer", **moe)
        m.add(f"{mp}.final_layernorm.weight", (h,))
    m.add("output_layer.weight", (c["vocab_size"], h), 0)
    return m


def qwen3_next_model(c: dict, gdn_tp: int = 1) -> LiveModel:
    m = LiveModel("qwen3_next", c, gdn_tp=gdn_tp)
    h = c["hidden_size"]
    types = c.get("layer_types") or [
        "full_attention" if (i + 1) % c["full_attention_interval"] == 0 else "linear_attention"
        for i in range(c["num_hidden_layers"])]
    m.add("embedding.word_embeddings.weight", (c["vocab_size"], h), 0)
    for i in range(c["num_hidden_layers"]):
        layer = f"decoder.layers.{i}"
        if types[i] == "linear_attention":
            m.gdn(layer, c)
        else:
            m.gqa_attention(layer, h, c["num_attention_heads"], c["num_key_value_heads"],
                            c["head_dim"], output_gate=True, qk_norm=True)
        sparse = (c["num_experts"] > 0 and (i + 1) % c["decoder_sparse_step"] == 0
                  and i not in c["mlp_only_layers"])
        if sparse:
            m.moe_mlp(layer, h, c["num_experts"], c["moe_intermediate_size"],
                      c["shared_expert_intermediate_size"], shared_gate=True, expert_bias=False)
        else:
            m.dense_mlp(layer, h, c["intermediate_size"])
    m.add("decoder.final_layernorm.weight", (h,))
    m.add("output_layer.weight", (c["vocab_size"], h), 0)
    return m


def live_model(family: str, variant: str) -> LiveModel:
    c = CONFIGS[family]
    if family == "llama":
        return llama_model(c)
    if family == "deepseek_v3":
        return deepseek_v3_model(c, sequential=variant == "sequential")
    return qwen3_next_model(c, gdn_tp=GDN_TP_LOCAL.get(variant, 1))


# ---------------------------------------------------------------------------------------------
# Values: seeded per canonical unfused name, so every variant holds the same numbers
# ---------------------------------------------------------------------------------------------

_SEQUENTIAL = re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.weight(_w|_v)?$")


def canonical(name: str) -> str:
    """Seed name: grouped-expert spelling (``local_experts.<e>.linear_fc1.weight_w`` ->
    ``linear_fc1.weight<e>_w``), live MTP spelling."""
    return _SEQUENTIAL.sub(lambda m: f".mlp.experts.linear_fc{m[2]}.weight{m[1]}{m[3] or ''}", name)


def rand(tag: str, shape: tuple) -> torch.Tensor:
    g = torch.Generator().manual_seed(SEED * 1_000_003 + zlib.crc32(tag.encode()))
    return torch.randn(shape, generator=g, dtype=torch.float32)


def unfused_value(kind: str, name: str, shape: tuple) -> torch.Tensor:
    """kind: param | exp_avg | exp_avg_sq. Norm-like 1-D weights near 1, matrices near 0."""
    t = rand(f"{kind}:{canonical(name)}", shape)
    if kind == "exp_avg":
        return 1e-3 * t
    if kind == "exp_avg_sq":
        return 1e-6 * t * t
    if name.endswith("expert_bias"):
        return 1e-3 * t
    if len(shape) == 1 and not name.endswith(("A_log", "dt_bias")):
        return 1.0 + 0.05 * t
    return 0.02 * t


def disk_entries(m: LiveModel, variant: str, kind: str) -> dict[str, torch.Tensor]:
    """``{FQN as written: tensor}`` for one variant (kind as in unfused_value). Fused tensors are
    cat(dim 0) of their sections' values; with the handlers, sections are written instead
    (gdn_fused: except GDN, which stays fused). A TP-local parameter's sections hold TP rank 0's
    rows: the leading size / tp rows of the full section's values."""
    handlers = variant != "fused"
    out: dict[str, torch.Tensor] = {}
    for p in m.params:
        if kind != "param" and p.buffer:
            continue
        if not p.rule:
            parts = [(p.name, unfused_value(kind, p.name, p.shape))]
        else:
            parts = [(s.name, unfused_value(kind, s.name, p.section_shape(s))) for s in p.sections]
            if p.tp_local > 1:
                parts = [(n, t[: t.shape[0] // p.tp_local].clone()) for n, t in parts]
            if not handlers or (variant == "gdn_fused" and p.rule == "gdn"):
                parts = [(p.name, torch.cat([t for _, t in parts], 0))]
        for name, t in parts:
            if handlers:  # handle_mtp_in_state_dict runs last (§6.7)
                name = name.replace(".mtp_model_layer.", ".transformer_layer.")
            assert name not in out, name
            out[name] = t
    return out


# ---------------------------------------------------------------------------------------------
# State dicts
# ---------------------------------------------------------------------------------------------


def megatron_args(family: str, variant: str) -> argparse.Namespace:
    """A Megatron-like args object (BYTE_IO leaf), derived from the HF config."""
    c = CONFIGS[family]
    h = c["hidden_size"]
    a = dict(
        num_layers=c["num_hidden_layers"], hidden_size=h,
        ffn_hidden_size=c["intermediate_size"], num_attention_heads=c["num_attention_heads"],
        padded_vocab_size=c["vocab_size"], max_position_embeddings=c["max_position_embeddings"],
        position_embedding_type="rope", normalization="RMSNorm", norm_epsilon=c["rms_norm_eps"],
        swiglu=True, untie_embeddings_and_output_weights=True, add_bias_linear=False,
        transformer_impl="transformer_engine", bf16=True, params_dtype=torch.bfloat16,
        main_params_dtype=torch.float32, tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1, expert_model_parallel_size=1,
        expert_tensor_parallel_size=1, context_parallel_size=1, data_parallel_size=1,
        use_distributed_optimizer=True, use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params", ckpt_format="fsdp_dtensor",
        optimizer="adam", lr=3e-4, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95,
        iteration=ITERATION, seed=SEED,
    )
    if "num_key_value_heads" in c:
        a.update(group_query_attention=True, num_query_groups=c["num_key_value_heads"])
    if "head_dim" in c:
        a["kv_channels"] = c["head_dim"]
    if family == "deepseek_v3":
        a.update(
            multi_latent_attention=True, mla_down_proj_fusion=True,
            q_lora_rank=c["q_lora_rank"], kv_lora_rank=c["kv_lora_rank"],
            qk_head_dim=c["qk_nope_head_dim"], qk_pos_emb_head_dim=c["qk_rope_head_dim"],
            v_head_dim=c["v_head_dim"], qk_layernorm=True, num_experts=c["n_routed_experts"],
            moe_layer_freq=[0] * c["first_k_dense_replace"]
            + [1] * (c["num_hidden_layers"] - c["first_k_dense_replace"]),
            moe_ffn_hidden_size=c["moe_intermediate_size"],
            moe_shared_expert_intermediate_size=c["moe_intermediate_size"] * c["n_shared_experts"],
            moe_router_topk=c["num_experts_per_tok"], moe_router_enable_expert_bias=True,
            moe_router_score_function="sigmoid", moe_grouped_gemm=variant != "sequential",
            mtp_num_layers=c["num_nextn_predict_layers"],
        )
    if family == "qwen3_next":
        a.update(
            qk_layernorm=True, attention_output_gate=True,
            experimental_attention_variant="gated_delta_net",
            linear_attention_freq=c["full_attention_interval"],
            linear_conv_kernel_dim=c["linear_conv_kernel_dim"],
            linear_key_head_dim=c["linear_key_head_dim"],
            linear_value_head_dim=c["linear_value_head_dim"],
            linear_num_key_heads=c["linear_num_key_heads"],
            linear_num_value_heads=c["linear_num_value_heads"],
            num_experts=c["num_experts"], moe_ffn_hidden_size=c["moe_intermediate_size"],
            moe_shared_expert_intermediate_size=c["shared_expert_intermediate_size"],
            moe_shared_expert_gate=True, moe_router_topk=c["num_experts_per_tok"],
            moe_grouped_gemm=True,
        )
    return argparse.Namespace(**a)


def state_dict(family: str, variant: str, m: LiveModel) -> dict:
    model = {"module." + k: v for k, v in disk_entries(m, variant, "param").items()}
    sd: dict = {"model": model}
    if variant in ("bridge", "bridge_tp2"):
        return sd
    avg = disk_entries(m, variant, "exp_avg")
    avg_sq = disk_entries(m, variant, "exp_avg_sq")
    sd["optimizer"] = {"state": {
        "module.module.module." + k: {
            "exp_avg": avg[k], "exp_avg_sq": avg_sq[k],
            "step": torch.tensor(float(ITERATION), dtype=torch.float32)}
        for k in avg}}
    sd["args"] = megatron_args(family, variant)
    sd["checkpoint_version"] = 3.0
    sd["iteration"] = ITERATION
    return sd


def flatten(sd: dict, prefix: str = "") -> dict:
    """DCP's flatten_state_dict for nested dicts: keys joined with '.'."""
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ---------------------------------------------------------------------------------------------
# Writing, reading back, verifying
# ---------------------------------------------------------------------------------------------


def write_dcp(sd: dict, path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    path.mkdir(parents=True)
    with warnings.catch_warnings():  # "torch.distributed is disabled…": single process on purpose
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(path)), no_dist=True)


def read_back(path: Path) -> tuple[dict, dict]:
    """(state_dict_metadata, {flat key: loaded value}) through torch's own reader."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    md = FileSystemReader(str(path)).read_metadata()
    sd: dict = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(str(path)),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    flat = {}
    for key, parts in md.planner_data.items():
        obj = sd
        for part in parts:
            obj = obj[part]
        flat[key] = obj
    return md.state_dict_metadata, flat


def verify(path: Path, sd: dict) -> tuple[dict, dict]:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    sdm, loaded = read_back(path)
    want = flatten(sd)
    assert set(sdm) == set(want), (path, sorted(set(sdm) ^ set(want))[:10])
    for key, ref in want.items():
        got = loaded[key]
        if isinstance(ref, torch.Tensor):
            assert not isinstance(sdm[key], BytesStorageMetadata), key
            assert tuple(sdm[key].size) == tuple(ref.shape), key
            assert sdm[key].properties.dtype == ref.dtype == torch.float32, key
            assert got.dtype == ref.dtype and torch.equal(got, ref), f"mismatch: {key}"
        elif isinstance(ref, argparse.Namespace):
            assert vars(got) == vars(ref), key
        else:
            assert got == ref, key
    return sdm, loaded


def check_names(m: LiveModel, variant: str, sdm: dict) -> None:
    """Spelling rules of §6 on the written keys, independently of how they were produced."""
    model_keys = [k for k in sdm if k.startswith("model.module.")]
    if variant == "fused":
        assert not any(".transformer_layer." in k or k.endswith(("_w", "_v")) for k in model_keys)
        assert not any(".input_layernorm." in k for k in model_keys)
    elif variant == "gdn_fused":  # handlers for all but GDN (§6.1): GDN fused under live names
        assert not any(re.search(r"\.linear_fc1\.weight\d*$", k) for k in model_keys)
        assert not any("linear_qkv_down_proj" in k or ".mtp_model_layer." in k for k in model_keys)
        assert not any(re.search(r"\.(in_proj|conv1d)\.weight\.(query|key|value|z|beta|alpha)\b", k)
                       for k in sdm)
        gdn = [p.name for p in m.params if p.rule == "gdn"]
        assert gdn and all(f"model.module.{n}" in sdm for n in gdn)
        assert all(f"optimizer.state.module.module.module.{n}.{st}" in sdm
                   for n in gdn for st in ("exp_avg", "exp_avg_sq", "step"))
    else:
        assert not any(re.search(r"\.linear_fc1\.weight\d*$", k) for k in model_keys)
        assert not any("linear_qkv_down_proj" in k or ".mtp_model_layer." in k
                       or re.search(r"\.(in_proj|conv1d)\.weight$", k) for k in model_keys)
    if variant == "sequential":
        assert not any(re.search(r"\.experts\.linear_fc\d\.weight\d", k) for k in model_keys)
    for k in sdm:  # buffers have no optimizer state
        if k.startswith("optimizer."):
            assert ".expert_bias." not in k, k


def check_fused_equals_cat(m: LiveModel, fused: dict, unfused: dict,
                           rules: tuple | None = None) -> int:
    """From disk: every fused tensor (and its exp_avg / exp_avg_sq) is cat(unfused sections).
    rules: only parameters fused by one of these rules (default: all)."""
    n = 0
    for p in m.params:
        if not p.rule or (rules is not None and p.rule not in rules):
            continue
        names = [s.name.replace(".mtp_model_layer.", ".transformer_layer.") for s in p.sections]
        pairs = [(f"model.module.{p.name}", [f"model.module.{s}" for s in names])]
        if not p.buffer:
            for st in ("exp_avg", "exp_avg_sq"):
                pairs.append((f"optimizer.state.module.module.module.{p.name}.{st}",
                              [f"optimizer.state.module.module.module.{s}.{st}" for s in names]))
        for fk, sks in pairs:
            cat = torch.cat([unfused[s] for s in sks], 0)
            assert fused[fk].shape == cat.shape and torch.equal(fused[fk], cat), fk
            n += 1
    return n


def check_same_values(a: dict, b: dict, rename) -> int:
    """Two variants with the same values under renamed keys (sequential, bridge)."""
    n = 0
    for k, v in a.items():
        if isinstance(v, torch.Tensor) and k.startswith("model."):
            assert torch.equal(v, b[rename(k)]), k
            n += 1
    return n


def check_gdn_fused(m: LiveModel, gdn_fused: dict, unfused: dict) -> tuple[int, int]:
    """gdn_fused vs unfused from disk: GDN in_proj / conv1d (model, exp_avg, exp_avg_sq) ==
    cat(unfused sections); every other key holds the same value under the same name.
    Returns (fused tensors checked, other tensors checked)."""
    n_cat = check_fused_equals_cat(m, gdn_fused, unfused, rules=("gdn",))
    fused_keys, section_keys = set(), set()
    for p in m.params:
        if p.rule != "gdn":
            continue
        for pre, suf in [("model.module.", "")] + [
                ("optimizer.state.module.module.module.", f".{st}")
                for st in ("exp_avg", "exp_avg_sq", "step")]:
            fused_keys.add(f"{pre}{p.name}{suf}")
            section_keys.update(f"{pre}{s.name}{suf}" for s in p.sections)
    assert fused_keys <= set(gdn_fused) and section_keys <= set(unfused)
    rest = set(gdn_fused) - fused_keys
    assert rest == set(unfused) - section_keys, sorted(rest ^ (set(unfused) - section_keys))[:10]
    n = 0
    for k in rest:
        v = gdn_fused[k]
        if isinstance(v, torch.Tensor):
            assert torch.equal(v, unfused[k]), k
            n += 1
    for p in m.params:  # steps of the fused GDN tensors equal their sections' steps
        if p.rule == "gdn":
            for s in p.sections:
                assert torch.equal(
                    gdn_fused[f"optimizer.state.module.module.module.{p.name}.step"],
                    unfused[f"optimizer.state.module.module.module.{s.name}.step"]), p.name
    return n_cat, n


def check_tp_local_sections(m: LiveModel, local: dict, unfused: dict) -> tuple[int, int]:
    """bridge_tp2 vs unfused from disk: the same model keys; each section of a TP-local parameter
    is TP rank 0's rows (leading size / tp rows of the unfused section), every other model tensor
    equal. Returns (TP-local sections checked, other model tensors checked)."""
    sections = {}
    for p in m.params:
        if p.tp_local > 1:
            for s in p.sections:
                sections[f"model.module.{s.name}"] = (p, s)
    assert sections
    model = {k: v for k, v in local.items() if k.startswith("model.")}
    assert set(model) == {k for k in unfused if k.startswith("model.")}
    n_local = n = 0
    for k, v in model.items():
        ref = unfused[k]
        if k in sections:
            p, s = sections[k]
            rows = s.size // p.tp_local
            assert ref.shape[0] == s.size and v.shape == (rows, *ref.shape[1:]), (k, v.shape)
            assert torch.equal(v, ref[:rows]), k
            n_local += 1
        else:
            assert torch.equal(v, ref), k
            n += 1
    for p in m.params:  # the TP-local live shape is the sum of the TP-local sections
        if p.tp_local > 1:
            assert p.shape[0] == sum(s.size for s in p.sections) // p.tp_local, p.name
    return n_local, n


def manifest_entry(family: str, variant: str, m: LiveModel, sdm: dict) -> dict:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    params = [p for p in m.params if not p.buffer]
    tensors = [k for k, v in sdm.items() if not isinstance(v, BytesStorageMetadata)]
    e = {
        "path": f"{family}/{variant}",
        "family": family,
        "variant": variant,
        "config": f"{family}/config.json",
        "handlers": variant != "fused",
        "has_optimizer": variant not in ("bridge", "bridge_tp2"),
        "has_args": variant not in ("bridge", "bridge_tp2"),
        "experts": ("sequential" if m.sequential else "grouped")
        if any(p.expert is not None for p in m.params) else None,
        "mtp_inner_on_disk": (None if not any(".mtp_model_layer." in p.name for p in m.params)
                              else "mtp_model_layer" if variant == "fused"
                              else "transformer_layer"),
        "num_keys": len(sdm),
        "num_model_tensors": sum(k.startswith("model.") for k in tensors),
        "num_optimizer_tensors": sum(k.startswith("optimizer.") for k in tensors),
        "num_live_params": len(params),
        "live_params": [{"name": p.name, "shape": list(p.shape), "tp_dim": p.tp_dim}
                        for p in params],
        "live_buffers": [{"name": p.name, "shape": list(p.shape)} for p in m.params if p.buffer],
        "fusions": {p.name: {"rule": p.rule,
                             "sections": [{"name": s.name, "size": s.size} for s in p.sections]}
                    for p in m.params if p.rule and p.rule != "absorb"},
        "absorbs": {p.name: p.sections[0].name for p in m.params if p.rule == "absorb"},
    }
    if family == "deepseek_v3":
        e["mla_fused_params"] = [p.name for p in m.params
                                 if ".linear_qkv_down_proj." in p.name]
    if variant in GDN_TP_LOCAL:  # live GDN shapes TP-local; fusions keep the full section sizes
        e["tp"] = GDN_TP_LOCAL[variant]
        e["gdn_tp_local"] = True
    if variant == "gdn_fused":
        e["gdn_fused_on_disk"] = True
    return e


def script_hash() -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(package_version("torch").encode())
    return h.hexdigest()


def build(tmp: Path, list_keys: bool) -> None:
    t0 = time.monotonic()
    manifest = {"schema": "shardscope.layout_fixtures/1", "torch": torch.__version__,
                "iteration": ITERATION, "seed": SEED, "checkpoints": []}
    for family, variants in VARIANTS.items():
        (tmp / family).mkdir()
        (tmp / family / "config.json").write_text(json.dumps(CONFIGS[family], indent=2) + "\n")
        loaded: dict[str, dict] = {}
        models: dict[str, LiveModel] = {}
        for variant in variants:
            m = models[variant] = live_model(family, variant)
            sd = state_dict(family, variant, m)
            path = tmp / family / variant
            write_dcp(sd, path)
            sdm, loaded[variant] = verify(path, sd)
            check_names(m, variant, sdm)
            manifest["checkpoints"].append(manifest_entry(family, variant, m, sdm))
            print_summary(family, variant, sdm, list_keys)
        n = check_fused_equals_cat(models["fused"], loaded["fused"], loaded["unfused"])
        print(f"  {family}: fused == cat(unfused sections) for {n} tensors")
        if "sequential" in loaded:
            n = check_same_values(loaded["sequential"], loaded["unfused"],
                                  lambda k: canonical(k))
            print(f"  {family}: sequential == grouped values for {n} model tensors")
        if "bridge" in loaded:
            n = check_same_values(loaded["bridge"], loaded["unfused"], lambda k: k)
            print(f"  {family}: bridge == unfused values for {n} model tensors")
        if "bridge_tp2" in loaded:
            assert set(loaded["bridge_tp2"]) == set(loaded["bridge"])
            n_local, n = check_tp_local_sections(models["bridge_tp2"], loaded["bridge_tp2"],
                                                 loaded["unfused"])
            print(f"  {family}: bridge_tp2 GDN sections == TP rank 0 rows (first half) of unfused "
                  f"for {n_local} tensors, other model tensors == unfused for {n}")
        if "gdn_fused" in loaded:
            n_cat, n = check_gdn_fused(models["gdn_fused"], loaded["gdn_fused"],
                                       loaded["unfused"])
            print(f"  {family}: gdn_fused GDN == cat(unfused sections) for {n_cat} tensors, "
                  f"other tensors == unfused for {n}")
    (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (tmp / ".complete").write_text(script_hash() + "\n")
    print(f"built in {time.monotonic() - t0:.1f}s")


def print_summary(family: str, variant: str, sdm: dict, list_keys: bool) -> None:
    """Key counts, then the model keys folded over layer and expert indices (or every key)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    byte_io = sorted(k for k, v in sdm.items() if isinstance(v, BytesStorageMetadata))
    model = sorted(k for k in sdm if k.startswith("model."))
    opt = [k for k in sdm if k.startswith("optimizer.")]
    print(f"{family}/{variant}: {len(sdm)} keys (model {len(model)}, optimizer {len(opt)}, "
          f"BYTE_IO {len(byte_io)}: {', '.join(byte_io) or '-'})")
    if list_keys:
        for k in sorted(sdm):
            v = sdm[k]
            print(f"    {k} {'BYTE_IO' if isinstance(v, BytesStorageMetadata) else list(v.size)}")
        return
    folded: dict[tuple, int] = {}
    for k in model:
        f = re.sub(r"\.layers\.\d+\.", ".layers.<i>.", k.removeprefix("model.module."))
        f = re.sub(r"(linear_fc[12]\.weight)\d+", r"\1<e>", f)
        f = re.sub(r"local_experts\.\d+\.", "local_experts.<e>.", f)
        key = (f, tuple(sdm[k].size))
        folded[key] = folded.get(key, 0) + 1
    for (f, shape), n in folded.items():
        print(f"    {f} {list(shape)}" + (f" x{n}" if n > 1 else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="fixture directory to (re)create")
    ap.add_argument("--list", action="store_true", help="print every key written")
    ns = ap.parse_args()
    out = ns.out.resolve()
    if out.exists() and any(out.iterdir()) and not (out / "MANIFEST.json").exists() \
            and not (out / ".complete").exists():
        print(f"refusing to replace {out}: not a layout fixture directory", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        build(tmp, ns.list)
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
