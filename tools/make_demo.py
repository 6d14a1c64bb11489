#!/usr/bin/env python3
"""Write ShardScope's bundled demo checkpoint: a tiny DeepSeek-V3-like model saved in
Megatron-FSDP's ``fsdp_dtensor`` format by real torch (DTensor + DCP over 2 gloo ranks).

    python tools/make_demo.py --out resources/demo/dsv3-mini

Layout written::

    dsv3-mini/latest_checkpointed_iteration.txt   "20"
    dsv3-mini/config.json                         HF DeepSeek-V3 style config
    dsv3-mini/iter_0000020/.metadata              DCP metadata (rank 0)
    dsv3-mini/iter_0000020/__0_0.distcp, __1_0.distcp

What is reproduced (see docs/formats.md §5.4, §6, §7.2):

* The *live* model is the fused Megatron/TE one: ``self_attention.linear_qkv_down_proj``
  (``[q_lora + kv_lora + rope, H]`` with the absorbed input norm as ``layer_norm_weight``),
  SwiGLU ``linear_fc1`` holding ``[W; V]``, TE grouped experts ``linear_fc1.weight<e>``, MTP inner
  layer ``mtp_model_layer``.  Its parameters are laid out per Megatron-FSDP parameter group
  (FSDP unit = TransformerLayer, expert and non-expert params apart) back to back in a flat buffer,
  padded to a multiple of ``DP * chunk_size_factor``; each rank owns one contiguous range (§6.2).
* Every parameter becomes a DTensor whose local tensor is the rank's flat slice viewed as
  ``(-1, *shape[1:])``; the fused ones are split on the flat slice the way
  ``handle_swiglu_in_state_dict`` / ``handle_mla_down_proj_in_state_dict`` do (§6.3-6.5), MTP keys
  are renamed to ``transformer_layer`` (§6.7).  Chunk metadata is computed the way
  ``uneven_dtensor.update_uneven_dtensor_chunk_metadata`` does it (all-gather of local shapes) and
  attached as ``__create_chunk_list__`` / ``__create_write_items__`` (§6.10), so DCP writes uneven,
  row-aligned chunks and ranks without rows write none.  As in Megatron, the chunk offsets/sizes
  are plain tuples (``ChunkStorageMetadata(offsets=tuple(...), sizes=tuple(...))``).
* Model tensors are the FP32 main weights; the optimizer is a real ``torch.optim.AdamW`` run for
  20 steps on each rank's FP32 shards (deterministic synthetic gradients), giving
  ``optimizer.state.module.module.module.<FQN>.{step,exp_avg,exp_avg_sq}`` and per-parameter
  ``optimizer.param_to_group_meta.module.module.module.<name>.<hyperparameter>`` BYTE_IO leaves
  (keyed by live parameter names, as Megatron's handlers only rename ``optimizer.state``).
* ``args`` (argparse.Namespace), ``checkpoint_version`` 3.0, ``iteration`` 20,
  ``opt_param_scheduler``, ``rng_state`` (``{"(0, 0)": [per-DP-rank dict]}``) and
  ``num_floating_point_operations_so_far`` as BYTE_IO / tensor leaves.

Everything is seeded: two runs give identical tensors and objects; the ``.distcp`` files are
byte-identical and ``.metadata`` differs only in ``storage_meta`` (save UUID, checkpoint path).

The MLA sections are asymmetric (q_lora 32 against kv_lora 16 + rope 8 = 24 rows), so a split
that merely halved the fused rows would be caught.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import socket
import sys
import tempfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

ITERATION = 20
DP = 2
SEED = 1234


# --------------------------------------------------------------------------------------------
# Model description
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cfg:
    hidden: int = 64
    layers: int = 4
    first_k_dense: int = 1
    experts: int = 4
    shared_experts: int = 1
    topk: int = 2
    moe_ffn: int = 8
    ffn: int = 32  # dense-layer SwiGLU intermediate size
    q_lora: int = 32
    kv_lora: int = 16
    rope: int = 8  # qk_pos_emb_head_dim
    nope: int = 16  # qk_head_dim
    v_head: int = 16
    heads: int = 2
    vocab: int = 128
    mtp: int = 1


@dataclass
class Param:
    """A live (fused) model parameter, named as ``named_parameters()`` of the FSDP module."""

    name: str
    shape: tuple
    is_expert: bool = False
    unit: int | None = None  # FSDP unit (TransformerLayer) id, None = not in a unit
    # filled by the layout
    group: int = -1
    offset: int = -1  # start in the group's flat buffer
    slices: dict = field(default_factory=dict)  # rank -> (a, b) slice of the flattened param

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def row(self) -> int:
        return math.prod(self.shape[1:])


def transformer_layer_params(cfg: Cfg, prefix: str, moe: bool, unit: int) -> list[Param]:
    """Parameters of one TE-spec TransformerLayer with fused MLA down-projection (FusedMLA)."""
    h = cfg.hidden
    att = f"{prefix}.self_attention"
    p = [
        # TELayerNormColumnParallelLinear: layer_norm_weight is the absorbed input_layernorm.
        Param(f"{att}.linear_qkv_down_proj.layer_norm_weight", (h,)),
        Param(f"{att}.linear_qkv_down_proj.weight", (cfg.q_lora + cfg.kv_lora + cfg.rope, h)),
        Param(f"{att}.linear_q_up_proj.layer_norm_weight", (cfg.q_lora,)),
        Param(f"{att}.linear_q_up_proj.weight", (cfg.heads * (cfg.nope + cfg.rope), cfg.q_lora)),
        Param(f"{att}.linear_kv_up_proj.layer_norm_weight", (cfg.kv_lora,)),
        Param(
            f"{att}.linear_kv_up_proj.weight", (cfg.heads * (cfg.nope + cfg.v_head), cfg.kv_lora)
        ),
        Param(f"{att}.linear_proj.weight", (h, cfg.heads * cfg.v_head)),
    ]
    if not moe:
        p += [
            Param(f"{prefix}.mlp.linear_fc1.layer_norm_weight", (h,)),
            Param(f"{prefix}.mlp.linear_fc1.weight", (2 * cfg.ffn, h)),
            Param(f"{prefix}.mlp.linear_fc2.weight", (h, cfg.ffn)),
        ]
    else:
        p.append(Param(f"{prefix}.pre_mlp_layernorm.weight", (h,)))
        p.append(Param(f"{prefix}.mlp.router.weight", (cfg.experts, h)))
        p += [
            Param(f"{prefix}.mlp.experts.linear_fc1.weight{e}", (2 * cfg.moe_ffn, h), True)
            for e in range(cfg.experts)
        ]
        p += [
            Param(f"{prefix}.mlp.experts.linear_fc2.weight{e}", (h, cfg.moe_ffn), True)
            for e in range(cfg.experts)
        ]
        sh = cfg.moe_ffn * cfg.shared_experts
        p += [
            Param(f"{prefix}.mlp.shared_experts.linear_fc1.weight", (2 * sh, h)),
            Param(f"{prefix}.mlp.shared_experts.linear_fc2.weight", (h, sh)),
        ]
    for q in p:
        q.unit = unit
    return p


def live_params(cfg: Cfg) -> list[Param]:
    """``named_parameters()`` of GPTModel (inside the Megatron-FSDP module), in module order."""
    h = cfg.hidden
    ps = [Param("embedding.word_embeddings.weight", (cfg.vocab, h))]
    unit = 0
    for i in range(cfg.layers):
        ps += transformer_layer_params(cfg, f"decoder.layers.{i}", i >= cfg.first_k_dense, unit)
        unit += 1
    ps.append(Param("decoder.final_layernorm.weight", (h,)))
    for m in range(cfg.mtp):
        mp = f"mtp.layers.{m}"
        ps += [
            Param(f"{mp}.enorm.weight", (h,)),
            Param(f"{mp}.hnorm.weight", (h,)),
            Param(f"{mp}.eh_proj.weight", (h, 2 * h)),
        ]
        ps += transformer_layer_params(cfg, f"{mp}.mtp_model_layer", True, unit)
        unit += 1
        ps.append(Param(f"{mp}.final_layernorm.weight", (h,)))
    ps.append(Param("output_layer.weight", (cfg.vocab, h)))
    return ps


def router_buffers(cfg: Cfg) -> list[tuple[str, tuple]]:
    """Persistent buffers in the state dict (not FSDP-sharded): router expert bias."""
    out = []
    for i in range(cfg.first_k_dense, cfg.layers):
        out.append((f"decoder.layers.{i}.mlp.router.expert_bias", (cfg.experts,)))
    for m in range(cfg.mtp):
        out.append((f"mtp.layers.{m}.mtp_model_layer.mlp.router.expert_bias", (cfg.experts,)))
    return out


# --------------------------------------------------------------------------------------------
# Megatron-FSDP flat-buffer layout (param_and_grad_buffer.py: _get_parameter_groups step 1 + 3,
# build_data_parallel_buffer_index, _get_dp_buffer_shard_bucket_index)
# --------------------------------------------------------------------------------------------


@dataclass
class Group:
    params: list
    is_expert: bool
    unit: int | None
    csf: int = 1  # chunk_size_factor
    size: int = 0  # padded bucket size

    @property
    def shard(self) -> int:
        return self.size // DP


def build_groups(params: list[Param]) -> list[Group]:
    groups: list[Group] = []
    for p in params:  # step 1: group by attributes (dtype/requires_grad uniform here)
        for g in groups:
            if g.is_expert == p.is_expert and g.unit == p.unit:
                g.params.append(p)
                break
        else:
            groups.append(Group([p], p.is_expert, p.unit))
    for gi, g in enumerate(groups):
        # step 3: order by row size (stable, descending), chunk_size_factor = lcm of row sizes
        g.params = sorted(g.params, key=lambda q: q.row, reverse=True)
        csf = g.params[0].row
        for q in g.params:
            if q.row == csf or (csf % q.row == 0 and q.numel % csf == 0) or q.numel < csf:
                continue
            csf = math.lcm(csf, q.row)
        g.csf = csf
        layout_group(g)
        for q in g.params:
            q.group = gi
    return groups


def layout_group(g: Group) -> None:
    """build_data_parallel_buffer_index: regular items back to back on chunk_size_factor
    boundaries, remainders paired into one grid cell, fragments (numel < csf) put into the gaps
    (largest first) and the rest packed into whole csf-sized slots, so no item ever straddles a
    csf boundary it cannot be split at. Shard boundaries are multiples of csf, hence row-aligned."""
    csf = g.csf
    regular = [q for q in g.params if q.numel >= csf]
    fragments = sorted((q for q in g.params if q.numel < csf), key=lambda q: -q.numel)
    idx = 0
    while regular:
        q = regular.pop(0)
        q.offset = idx
        if q.numel % csf == 0:
            idx += q.numel
            continue
        gap = idx + q.numel
        idx += (q.numel // csf + 1) * csf
        remain = q.numel % csf
        space = csf - remain
        for rhs in regular:
            rr = rhs.numel % csf
            if rr and remain + rr <= csf:
                regular.remove(rhs)
                rhs.offset = idx - rr
                space -= rr
                idx += rhs.numel // csf * csf
                break
        for f in list(fragments):
            if f.numel <= space:
                f.offset = gap
                gap += f.numel
                space -= f.numel
                fragments.remove(f)
    slots: list[list[Param]] = []
    for f in fragments:
        for s in slots:
            if sum(x.numel for x in s) + f.numel <= csf:
                s.append(f)
                break
        else:
            slots.append([f])
    for s in slots:
        o = 0
        for f in s:
            f.offset = idx + o
            o += f.numel
        idx += csf
    g.size = int(math.ceil(idx / (DP * csf)) * DP * csf)
    for q in g.params:
        for r in range(DP):
            lo, hi = r * g.shard, (r + 1) * g.shard
            a = min(max(lo - q.offset, 0), q.numel)
            b = max(min(hi - q.offset, q.numel), 0)
            if a >= b:
                a = b = 0
            # Row alignment is what makes (-1, *shape[1:]) views possible.
            assert a % q.row == 0 and b % q.row == 0, (q.name, a, b, q.row)
            q.slices[r] = (a, b)


# --------------------------------------------------------------------------------------------
# On-disk tensors after preprocess_fsdp_dtensor_state_dict (SwiGLU -> MLA -> experts -> MTP)
# --------------------------------------------------------------------------------------------


@dataclass
class DiskTensor:
    fqn: str  # module FQN as written (after the handlers), without wrapper prefixes
    param: Param
    rows: tuple  # (r0, r1) rows of the live parameter

    @property
    def shape(self) -> tuple:
        return (self.rows[1] - self.rows[0], *self.param.shape[1:])


def disk_tensors(cfg: Cfg, params: list[Param]) -> list[DiskTensor]:
    import re

    swiglu = [
        r"\.mlp\.linear_fc1\.weight$",
        r"\.mlp\.experts\.linear_fc1\.weight\d+$",
        r"\.mlp\.shared_experts\.linear_fc1\.weight$",
    ]
    out = []
    for p in params:
        n = p.name
        rows = p.shape[0]
        if any(re.search(pat, n) for pat in swiglu):
            # flat halves of the (TP-local) tensor: W = gate = first half, V = up = second half
            out.append(DiskTensor(n + "_w", p, (0, rows // 2)))
            out.append(DiskTensor(n + "_v", p, (rows // 2, rows)))
        elif n.endswith(".self_attention.linear_qkv_down_proj.weight"):
            base = n[: -len("linear_qkv_down_proj.weight")]
            q = cfg.q_lora
            out.append(DiskTensor(base + "linear_q_down_proj.weight", p, (0, q)))
            out.append(DiskTensor(base + "linear_kv_down_proj.weight", p, (q, rows)))
        elif n.endswith(".self_attention.linear_qkv_down_proj.layer_norm_weight"):
            layer = n[: -len(".self_attention.linear_qkv_down_proj.layer_norm_weight")]
            out.append(DiskTensor(layer + ".input_layernorm.weight", p, (0, rows)))
        else:
            out.append(DiskTensor(n, p, (0, rows)))
    for t in out:  # handle_mtp_in_state_dict runs last
        t.fqn = t.fqn.replace(".mtp_model_layer.", ".transformer_layer.")
    return out


# --------------------------------------------------------------------------------------------
# Deterministic content
# --------------------------------------------------------------------------------------------


def _gen(tag: str) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(SEED * 1_000_003 + zlib.crc32(tag.encode()))
    return g


def init_param(p: Param) -> torch.Tensor:
    g = _gen("init:" + p.name)
    if len(p.shape) == 1:  # norms
        return 1.0 + 0.05 * torch.randn(p.shape, generator=g)
    return 0.02 * torch.randn(p.shape, generator=g)


def grad_for(p: Param, step: int) -> torch.Tensor:
    g = _gen(f"grad{step}:" + p.name)
    return 1e-2 * torch.randn(p.shape, generator=g)


def lr_at(it: int) -> float:
    max_lr, warmup, init = 3.9e-4, 10, 3.9e-6
    if it <= warmup:
        return init + (max_lr - init) * it / warmup
    return max_lr


# --------------------------------------------------------------------------------------------
# uneven_dtensor.py equivalents
# --------------------------------------------------------------------------------------------


def attach_uneven_chunk_metadata(dt) -> None:
    """update_uneven_dtensor_chunk_metadata for a 1-D DP mesh with Shard(0)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        MetadataIndex,
        TensorProperties,
    )
    from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

    local = dt.to_local()
    shapes = [None] * dist.get_world_size()
    dist.all_gather_object(shapes, list(local.shape))
    rank = dist.get_rank()
    offsets = [0] * local.dim()
    offsets[0] = sum(s[0] for s in shapes[:rank])
    meta = ChunkStorageMetadata(offsets=tuple(offsets), sizes=tuple(local.shape))

    def _write_items(fqn, tensor):
        if tensor.to_local().numel() == 0:
            return []
        return [
            WriteItem(
                type=WriteItemType.SHARD,
                index=MetadataIndex(fqn, meta.offsets),
                tensor_data=TensorWriteData(
                    chunk=meta,
                    properties=TensorProperties.create_from_tensor(tensor.to_local()),
                    size=tensor.size(),
                ),
            )
        ]

    dt._local_tensor.__create_chunk_list__ = lambda: [meta]
    dt._local_tensor.__create_write_items__ = _write_items


# --------------------------------------------------------------------------------------------
# Non-tensor state
# --------------------------------------------------------------------------------------------


def make_args(cfg: Cfg) -> argparse.Namespace:
    return argparse.Namespace(
        num_layers=cfg.layers,
        hidden_size=cfg.hidden,
        ffn_hidden_size=cfg.ffn,
        num_attention_heads=cfg.heads,
        kv_channels=cfg.nope,
        max_position_embeddings=256,
        position_embedding_type="rope",
        rotary_base=10000,
        rotary_scaling_factor=40.0,
        normalization="RMSNorm",
        norm_epsilon=1e-6,
        swiglu=True,
        untie_embeddings_and_output_weights=True,
        add_bias_linear=False,
        multi_latent_attention=True,
        mla_down_proj_fusion=True,
        q_lora_rank=cfg.q_lora,
        kv_lora_rank=cfg.kv_lora,
        qk_head_dim=cfg.nope,
        qk_pos_emb_head_dim=cfg.rope,
        v_head_dim=cfg.v_head,
        qk_layernorm=True,
        num_experts=cfg.experts,
        moe_layer_freq=[0] * cfg.first_k_dense + [1] * (cfg.layers - cfg.first_k_dense),
        moe_ffn_hidden_size=cfg.moe_ffn,
        moe_shared_expert_intermediate_size=cfg.moe_ffn * cfg.shared_experts,
        moe_router_topk=cfg.topk,
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_dtype="fp32",
        moe_grouped_gemm=True,
        moe_token_dispatcher_type="alltoall",
        mtp_num_layers=cfg.mtp,
        mtp_loss_scaling_factor=0.1,
        vocab_size=cfg.vocab,
        padded_vocab_size=cfg.vocab,
        make_vocab_size_divisible_by=128,
        seq_length=128,
        micro_batch_size=1,
        global_batch_size=2,
        train_iters=100,
        lr=3.9e-4,
        min_lr=3.9e-5,
        lr_warmup_iters=10,
        lr_warmup_init=3.9e-6,
        lr_decay_style="cosine",
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-8,
        clip_grad=1.0,
        init_method_std=0.02,
        optimizer="adam",
        bf16=True,
        fp16=False,
        params_dtype=torch.bfloat16,
        main_params_dtype=torch.float32,
        transformer_impl="transformer_engine",
        use_mcore_models=True,
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        context_parallel_size=1,
        expert_model_parallel_size=1,
        expert_tensor_parallel_size=1,
        data_parallel_size=DP,
        world_size=DP,
        rank=0,
        use_distributed_optimizer=True,
        use_megatron_fsdp=True,
        data_parallel_sharding_strategy="optim_grads_params",
        ckpt_format="fsdp_dtensor",
        save="resources/demo/dsv3-mini",
        load=None,
        save_interval=20,
        iteration=ITERATION,
        consumed_train_samples=ITERATION * 2,
        seed=SEED,
        tokenizer_type="NullTokenizer",
    )


def rng_state_dict() -> dict:
    """Megatron get_rng_state(): per-rank dict, DP-gathered, keyed "(pp, tp)" for fsdp_dtensor.
    The CUDA entries are deterministic 16-byte stand-ins (there is no GPU here)."""
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    for _ in range(ITERATION):
        random.random()
        np.random.rand()
        torch.rand(1)
    g = _gen("cuda-rng")

    def fake_cuda():
        return torch.randint(0, 256, (16,), dtype=torch.uint8, generator=g)

    one = {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
        "cuda_rng_state": fake_cuda(),
        "rng_tracker_states": {
            "model-parallel-rng": fake_cuda(),
            "expert-parallel-rng": fake_cuda(),
            "data-parallel-rng": fake_cuda(),
        },
    }
    # data_parallel_random_init is off: every DP rank has the same state.
    import copy

    return {"(0, 0)": [copy.deepcopy(one) for _ in range(DP)]}


def opt_param_scheduler_state() -> dict:
    return {
        "max_lr": 3.9e-4,
        "lr_warmup_steps": 10 * 2,
        "num_steps": ITERATION * 2,
        "lr_decay_style": "cosine",
        "lr_decay_steps": 100 * 2,
        "min_lr": 3.9e-5,
        "start_wd": 0.1,
        "end_wd": 0.1,
        "wd_incr_style": "constant",
        "wd_incr_steps": 100 * 2,
    }


# --------------------------------------------------------------------------------------------
# Worker: one process per DP rank
# --------------------------------------------------------------------------------------------


def worker(rank: int, port: int, ckpt_dir: str, expected_path: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", rank=rank, world_size=DP)
    try:
        cfg = Cfg()
        params = live_params(cfg)
        groups = build_groups(params)
        mesh = init_device_mesh("cpu", (DP,), mesh_dim_names=("dp_shard",))

        # FP32 main-weight shards of this rank, one flat tensor per owned parameter piece.
        main: dict[str, torch.Tensor] = {}
        for p in params:
            a, b = p.slices[rank]
            main[p.name] = init_param(p).reshape(-1)[a:b].clone()

        # Megatron _get_param_groups: no weight decay for 1-D params; experts flagged.
        def group_key(p):
            return (len(p.shape) == 1, p.is_expert)

        torch_groups: dict = OrderedDict()
        for p in params:
            if main[p.name].numel() == 0:
                continue  # empty local shard: not in this rank's optimizer
            torch_groups.setdefault(group_key(p), []).append(p)
        shard_params = {p.name: torch.nn.Parameter(main[p.name]) for p in params}
        opt_groups = []
        for (no_wd, expert), ps in torch_groups.items():
            opt_groups.append(
                {
                    "params": [shard_params[p.name] for p in ps],
                    "wd_mult": 0.0 if no_wd else 1.0,
                    "lr_mult": 1.0,
                    "is_expert_parallel": expert,
                    "is_decoupled_lr": False,
                }
            )
        opt = torch.optim.AdamW(
            opt_groups, lr=lr_at(0), betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1
        )
        for it in range(1, ITERATION + 1):
            for grp in opt.param_groups:
                grp["lr"] = lr_at(it) * grp["lr_mult"]
                grp["weight_decay"] = 0.1 * grp["wd_mult"]
            for p in params:
                a, b = p.slices[rank]
                if b > a:
                    shard_params[p.name].grad = grad_for(p, it).reshape(-1)[a:b].clone()
            opt.step()
            opt.zero_grad(set_to_none=True)

        param_of = {id(sp): name for name, sp in shard_params.items()}
        name_group = {}
        for grp in opt.param_groups:
            for sp in grp["params"]:
                name_group[param_of[id(sp)]] = {k: v for k, v in grp.items() if k != "params"}

        def piece(p: Param, flat: torch.Tensor, rows: tuple) -> torch.Tensor:
            """Flat-slice split (§6.3): the rank's piece of rows [r0, r1) of parameter p."""
            a, _ = p.slices[rank]
            lo, hi = rows[0] * p.row, rows[1] * p.row
            s = max(a, lo)
            e = min(a + flat.numel(), hi)
            if s >= e:
                return torch.empty((0, *p.shape[1:]), dtype=flat.dtype)
            return flat[s - a : e - a].view(-1, *p.shape[1:])

        def fsdp_dtensor(local: torch.Tensor, shape: tuple):
            stride = torch.empty(shape, device="meta").stride()
            dt = DTensor.from_local(
                local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape), stride=stride
            )
            return dt

        dts = disk_tensors(cfg, params)
        model_sd: dict = {}
        for t in dts:
            model_sd["module." + t.fqn] = fsdp_dtensor(
                piece(t.param, shard_params[t.param.name].detach(), t.rows), t.shape
            )
        for name, shape in router_buffers(cfg):
            g = _gen("buffer:" + name)
            fqn = name.replace(".mtp_model_layer.", ".transformer_layer.")
            model_sd["module." + fqn] = 1e-3 * torch.randn(shape, generator=g)

        state: dict = {}
        for t in dts:
            sp = shard_params[t.param.name]
            st = opt.state.get(sp, {})
            entry: dict = {}
            if "step" in st:
                entry["step"] = st["step"].clone()
            for k in ("exp_avg", "exp_avg_sq"):
                flat = st[k] if k in st else torch.zeros(0)
                entry[k] = fsdp_dtensor(piece(t.param, flat, t.rows), t.shape)
            state["module.module.module." + t.fqn] = entry
        group_meta = {
            "module.module.module." + name: meta for name, meta in sorted(name_group.items())
        }
        optim_sd = {"state": state, "param_to_group_meta": group_meta}

        sd = {
            "args": make_args(cfg),
            "checkpoint_version": 3.0,
            "iteration": ITERATION,
            "model": model_sd,
            "optimizer": optim_sd,
            "opt_param_scheduler": opt_param_scheduler_state(),
            "rng_state": rng_state_dict(),
            "num_floating_point_operations_so_far": 1234567890123,
        }

        # preprocess_state_dict_for_uneven_dtensor: every DTensor, in sorted key-path order.
        paths = []

        def walk(d, path):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, path + [k])
                elif isinstance(v, DTensor):
                    paths.append(path + [k])

        walk(sd, [])
        for path in sorted(paths):
            obj = sd
            for k in path:
                obj = obj[k]
            attach_uneven_chunk_metadata(obj)

        dcp.save(sd, storage_writer=dcp.FileSystemWriter(ckpt_dir))

        # Reference for verification: full on-disk tensors, gathered to rank 0.
        local = {}
        for key, dt in model_sd.items():
            if isinstance(dt, DTensor):
                local["model." + key] = dt
        for key, entry in state.items():
            for k in ("exp_avg", "exp_avg_sq"):
                local[f"optimizer.state.{key}.{k}"] = entry[k]
        mine = {}
        for key, dt in local.items():
            loc = dt.to_local()
            if loc.numel():
                off = dt._local_tensor.__create_chunk_list__()[0].offsets[0]
                mine[key] = (off, loc.clone())
        gathered = [None] * DP
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            full = {}
            for key, dt in local.items():
                full[key] = torch.zeros(dt.shape, dtype=torch.float32)
            for part in gathered:
                for key, (off, t) in part.items():
                    full[key][off : off + t.shape[0]] = t
            for key, val in model_sd.items():
                if not isinstance(val, DTensor):
                    full["model." + key] = val
            torch.save(full, expected_path)
        dist.barrier()
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hf_config(cfg: Cfg) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.layers,
        "num_attention_heads": cfg.heads,
        "q_lora_rank": cfg.q_lora,
        "kv_lora_rank": cfg.kv_lora,
        "qk_rope_head_dim": cfg.rope,
        "qk_nope_head_dim": cfg.nope,
        "v_head_dim": cfg.v_head,
        "n_routed_experts": cfg.experts,
        "n_shared_experts": cfg.shared_experts,
        "num_experts_per_tok": cfg.topk,
        "moe_intermediate_size": cfg.moe_ffn,
        "intermediate_size": cfg.ffn,
        "first_k_dense_replace": cfg.first_k_dense,
        "num_nextn_predict_layers": cfg.mtp,
        "vocab_size": cfg.vocab,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def summarize_and_verify(ckpt_dir: str, expected_path: str) -> None:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner

    md = FileSystemReader(ckpt_dir).read_metadata()
    sdm = md.state_dict_metadata
    tensors = {k: v for k, v in sdm.items() if not isinstance(v, BytesStorageMetadata)}
    nbytes = len(sdm) - len(tensors)
    chunks = sum(len(v.chunks) for v in tensors.values())
    multi = {k: v for k, v in tensors.items() if len(v.chunks) > 1}
    uneven = {
        k: v for k, v in multi.items() if len({tuple(c.sizes) for c in v.chunks}) > 1
    }
    model_keys = [k for k in tensors if k.startswith("model.")]
    print(f"keys: {len(sdm)}  (tensor {len(tensors)}, BYTE_IO {nbytes}); chunks: {chunks}")
    print(f"model tensors: {len(model_keys)}; multi-chunk tensors: {len(multi)}; "
          f"uneven: {len(uneven)}")
    files = {si.relative_path for si in md.storage_data.values()}
    print(f"data files: {sorted(files)}")
    for k in list(uneven)[:8]:
        v = uneven[k]
        cs = ", ".join(f"{tuple(c.offsets)}+{tuple(c.sizes)}" for c in v.chunks)
        print(f"  {k} {tuple(v.size)}: {cs}")
    for k in ("model.module.decoder.layers.1.self_attention.linear_q_down_proj.weight",
              "model.module.decoder.layers.1.self_attention.linear_kv_down_proj.weight",
              "model.module.decoder.layers.1.input_layernorm.weight",
              "model.module.mtp.layers.0.transformer_layer.mlp.experts.linear_fc1.weight3_w"):
        v = sdm[k]
        print(f"  {k} {tuple(v.size)} {v.properties.dtype} chunks={len(v.chunks)}")
    assert not any(".mtp_model_layer." in k for k in model_keys)
    assert not any("linear_qkv_down_proj" in k for k in model_keys)

    # Full load through torch and compare with the gathered reference.
    sd: dict = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(ckpt_dir),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    expected = torch.load(expected_path)

    def get(path):
        obj = sd
        for part in md.planner_data[path]:
            obj = obj[part]
        return obj

    for key, ref in expected.items():
        got = get(key)
        assert got.dtype == ref.dtype and got.shape == ref.shape, key
        assert torch.equal(got, ref), f"mismatch: {key}"
    assert get("iteration") == ITERATION and get("checkpoint_version") == 3.0
    args = get("args")
    assert args.swiglu and args.num_experts == 4 and args.multi_latent_attention
    print(f"dcp.load: {len(expected)} tensors identical to the ranks' gathered data; "
          f"args/iteration/checkpoint_version ok")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="checkpoint root, e.g. resources/demo/dsv3-mini")
    ns = ap.parse_args()

    out = os.path.abspath(ns.out)
    if os.path.exists(out) and os.listdir(out):
        if not os.path.exists(os.path.join(out, "latest_checkpointed_iteration.txt")):
            print(f"refusing to overwrite non-checkpoint directory {out}", file=sys.stderr)
            return 2
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    ckpt_dir = os.path.join(out, f"iter_{ITERATION:07d}")

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        expected_path = os.path.join(tmp, "expected.pt")
        mp.spawn(worker, args=(free_port(), ckpt_dir, expected_path), nprocs=DP, join=True)
        with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(ITERATION))
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(hf_config(Cfg()), f, indent=2)
            f.write("\n")
        summarize_and_verify(ckpt_dir, expected_path)

    total = 0
    for root, _, names in os.walk(out):
        for n in names:
            total += os.path.getsize(os.path.join(root, n))
    print(f"wrote {out} ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
