#!/usr/bin/env python3
"""Write ShardScope's test checkpoints with real PyTorch.

    python tools/make_fixtures.py --out DIR

Every fixture is produced by the public torch / safetensors writers (DCP FileSystemWriter from
1, 2 and 4 gloo ranks, torch.save, safetensors.torch.save_file), so the C++ reader is tested
against what torch really puts on disk, not against our reading of the spec. The hostile inputs
under bad/ are derived from good fixtures or crafted byte by byte (never unpickled here).

Idempotent: DIR/.complete holds a hash of this script and the torch version; when it matches,
the script exits at once. The set is built in a sibling temp dir and renamed into place, under an
flock, so a half-written set is never visible and parallel callers (ctest -j) do not collide.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import math
import os
import pickle
import pickletools
import random
import shutil
import socket
import struct
import sys
import time
import zlib
from collections import OrderedDict
from importlib.metadata import version as package_version
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Write ShardScope's test checkpoints with real PyTorch.")
    ap.add_argument("--out", required=True, type=Path, help="fixture directory to (re)create")
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    return ap.parse_args(argv)


def script_hash() -> str:
    """Fixture-set identity: this script plus the torch that writes it."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(package_version("torch").encode())
    return h.hexdigest()


def up_to_date(out: Path, force: bool = False) -> bool:
    stamp = out / ".complete"
    return not force and stamp.is_file() and stamp.read_text().strip() == script_hash()


# Fast path before the ~4 s torch import: an up-to-date set costs only a file read.
if __name__ == "__main__":
    _args = parse_args()
    if up_to_date(_args.out.resolve(), _args.force):
        sys.exit(0)

import numpy as np  # noqa: E402  (heavy imports deliberately after the fast path)
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    MetadataIndex,
    TensorProperties,
)
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

# The dtypes every "all dtypes" fixture carries (the set torch.save, DCP and safetensors share).
ALL_DTYPES = [
    torch.float32, torch.float16, torch.float64, torch.bfloat16,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64,
]
DTYPE_NAME = {dt: str(dt).removeprefix("torch.") for dt in ALL_DTYPES}

# Integer ranges for random ints; int64 stays within +-2^62 so randint's bounds fit.
INT_RANGE = {
    torch.int8: (-128, 128), torch.int16: (-(2**15), 2**15), torch.int32: (-(2**31), 2**31),
    torch.int64: (-(2**62), 2**62), torch.uint8: (0, 256),
}


# ---------------------------------------------------------------------------------------------
# Deterministic values
# ---------------------------------------------------------------------------------------------

def rand(name: str, shape, dtype=torch.float32, scale: float = 2.0) -> torch.Tensor:
    """Random but reproducible tensor: the seed depends only on `name`, so every rank (and every
    run) builds bit-identical full tensors and slices its own shard out of them."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    shape = tuple(shape)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype in INT_RANGE:
        lo, hi = INT_RANGE[dtype]
        return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)
    if dtype.is_complex:
        re = torch.randn(shape, generator=g) * scale
        im = torch.randn(shape, generator=g) * scale
        return torch.complex(re, im).to(dtype)
    base = torch.float64 if dtype is torch.float64 else torch.float32
    return (torch.randn(shape, generator=g, dtype=base) * scale).to(dtype)


def nan_inf_tensor(dtype=torch.float32) -> torch.Tensor:
    t = rand(f"nan_inf.{dtype}", (4, 4), dtype)
    t[0, 0] = float("nan")
    t[1, 1] = float("inf")
    t[2, 2] = float("-inf")
    t[3, 3] = float("nan")
    t[0, 3] = float("inf")
    return t


def denormal_f32() -> torch.Tensor:
    # Smallest subnormal, a few mid subnormals of both signs, min normal, and ordinary values.
    return torch.tensor([1.4e-45, -1.4e-45, 1e-40, -3.5e-42, 1.1754942e-38, 1.17549435e-38,
                         0.0, -0.0, 1.5, -2.25], dtype=torch.float32)


def denormal_f16() -> torch.Tensor:
    # float16 subnormals are below 6.1e-5; 6e-8 is the smallest.
    return torch.tensor([6e-8, -6e-8, 3e-5, -1e-5, 6.104e-5, 1.0, -0.0], dtype=torch.float16)


def dtype_tensors(tag: str, shape=(3, 5)) -> dict[str, torch.Tensor]:
    return {DTYPE_NAME[dt]: rand(f"{tag}.{DTYPE_NAME[dt]}", shape, dt) for dt in ALL_DTYPES}


def make_namespace(**extra) -> argparse.Namespace:
    """A Megatron-like args object (torch.dtype fields included: the C++ pickle VM must cope)."""
    ns = argparse.Namespace(
        num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=128, micro_batch_size=2,
        lr=3e-4, min_lr=3e-5, weight_decay=0.1, adam_beta1=0.9, adam_beta2=0.95, bf16=True,
        params_dtype=torch.bfloat16, swiglu=True, tokenizer_type="GPT2BPETokenizer",
        # The model the fixtures hold: RMSNorm, no linear biases, rotary positions (Megatron's
        # defaults would be LayerNorm, biases and learned positions).
        normalization="RMSNorm", add_bias_linear=False, position_embedding_type="rope",
        data_path=["/data/corpus_text_document"], seed=1234, eval_iters=None,
    )
    for k, v in extra.items():
        setattr(ns, k, v)
    return ns


def rng_state_dict(i: int) -> dict:
    """One Megatron-style RNG entry: python/numpy tuples plus uint8 torch states."""
    return {
        "random_rng_state": random.Random(i).getstate(),
        "np_rng_state": np.random.RandomState(i).get_state(),
        "torch_rng_state": torch.Generator().manual_seed(1000 + i).get_state(),
        "cuda_rng_state": rand(f"cuda_rng.{i}", (16,), torch.uint8),
        "rng_tracker_states": {"model-parallel-rng": rand(f"tracker.{i}", (16,), torch.uint8)},
    }


def adamw_state() -> tuple[dict, dict]:
    """A real AdamW step on a small module: (module state_dict, optimizer state_dict)."""
    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    x = rand("adamw.x", (5, 4))
    net(x).pow(2).mean().backward()
    opt.step()
    return net.state_dict(), opt.state_dict()


# ---------------------------------------------------------------------------------------------
# Distributed writers (run inside gloo worker processes)
# ---------------------------------------------------------------------------------------------

def chunk_of(full: torch.Tensor, dim: int, parts: int, idx: int) -> torch.Tensor:
    """The piece DTensor's Shard(dim) gives rank `idx` (torch.chunk semantics; trailing ranks may
    get an empty piece)."""
    pieces = list(full.chunk(parts, dim))
    if idx < len(pieces):
        return pieces[idx]
    return full.narrow(dim, full.size(dim), 0)


def from_local_shard(full: torch.Tensor, mesh, dim: int) -> DTensor:
    """DTensor.from_local with the even-chunk layout; used where distribute_tensor cannot run
    (gloo cannot scatter float8) and to exercise the second constructor."""
    local = chunk_of(full, dim, mesh.size(), mesh.get_local_rank()).contiguous()
    return DTensor.from_local(local, mesh, [Shard(dim)], run_check=False,
                              shape=full.shape, stride=full.stride())


def generic_state(world: int, mesh, mesh2d) -> dict:
    """The content of dcp_{1rank,2ranks,4ranks}: the same keys and values in all three except
    head.* (rows = world - 1, to have fewer rows than ranks) and the 4-rank-only grid.* (2x2
    mesh); the sharding differs with `world`."""
    fewer = max(world - 1, 1)  # fewer rows than ranks (for world >= 2)
    model = {
        "embed.weight": distribute_tensor(rand("embed", (16, 8)), mesh, [Shard(0)]),
        "attn.qkv.weight": distribute_tensor(rand("qkv", (24, 8), torch.bfloat16), mesh, [Shard(0)]),
        "attn.proj.weight": distribute_tensor(rand("proj", (8, 12), torch.bfloat16), mesh, [Shard(1)]),
        # 7 rows / 7 cols: uneven over 2 and 4 ranks.
        "mlp.up.weight": distribute_tensor(rand("up", (7, 6), torch.float16), mesh, [Shard(0)]),
        "mlp.down.weight": distribute_tensor(rand("down", (6, 7)), mesh, [Shard(1)]),
        "head.tiny": distribute_tensor(rand("tiny", (fewer, 5)), mesh, [Shard(0)]),
        "head.bias": from_local_shard(rand("hbias", (fewer,)), mesh, 0),
        "norm.weight": distribute_tensor(rand("norm", (8,)), mesh, [Replicate()]),
        "rope.freqs": distribute_tensor(rand("rope", (4, 4), torch.float64), mesh, [Replicate()]),
        "fp8.weight": from_local_shard(rand("fp8w", (7, 4), torch.float8_e4m3fn), mesh, 0),
        "fp8.weight_e5m2": from_local_shard(rand("fp8w2", (5, 3), torch.float8_e5m2), mesh, 1),
        "mask": distribute_tensor(rand("mask", (6, 3), torch.bool), mesh, [Shard(0)]),
        "cplx": distribute_tensor(rand("cplx", (3, 8), torch.complex64), mesh, [Shard(1)]),
        "ids": from_local_shard(rand("ids", (9,), torch.int64), mesh, 0),
    }
    if mesh2d is not None:
        # 2-D mesh (2x2): a chunk grid, replicas deduplicated, and nested sharding of one dim.
        model["grid.s0_s1"] = distribute_tensor(rand("g01", (6, 10)), mesh2d, [Shard(0), Shard(1)])
        model["grid.rep_s0"] = distribute_tensor(rand("gr0", (5, 4), torch.bfloat16), mesh2d,
                                                 [Replicate(), Shard(0)])
        model["grid.s0_s0"] = distribute_tensor(rand("g00", (9, 2)), mesh2d, [Shard(0), Shard(0)])

    view_base = rand("view_base", (6, 5))
    slice_base = rand("slice_base", (8, 9))
    net_sd, opt_sd = adamw_state()
    return {
        "model": model,
        "dtypes": dtype_tensors("dcp"),
        "special": {
            "nan_inf": nan_inf_tensor(torch.float32),
            "nan_inf_bf16": nan_inf_tensor(torch.bfloat16),
            "denormal_f32": denormal_f32(),
            "denormal_f16": denormal_f16(),
            "scalar": torch.tensor(3.25),
            "scalar_i64": torch.tensor(-7, dtype=torch.int64),
            "empty": torch.empty(0, 4),
            "empty_mid": torch.zeros(3, 0, 2, dtype=torch.bfloat16),
        },
        "views": {
            "transposed": view_base.t(),          # non-contiguous, same storage size
            "strided_slice": slice_base[::2, 1::3],  # non-contiguous, smaller than its storage
        },
        "extra": {
            "list": [rand("l0", (3,)), rand("l1", (2, 2), torch.float16), {"x": rand("l2x", (4,), torch.int32)}],
            "tuple": (1, "two", 3.0),
            "namespace": argparse.Namespace(alpha=0.5, name="extra", flags=[1, 2, 3]),
        },
        "net": net_sd,
        "optim": opt_sd,
        "iteration": 1234,
        "loss": 2.5,
        "run_name": "shardscope-fixture",
        "loss_scale": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5},
        "args": make_namespace(),
        "shape_tuple": (3, 4),
    }


def zstd_state(mesh) -> dict:
    return {
        "model": {
            "w": distribute_tensor(rand("zw", (6, 4)), mesh, [Shard(0)]),
            "b": rand("zb", (4,), torch.bfloat16),
            "fp8": rand("zf8", (3, 3), torch.float8_e5m2),
            "mask": rand("zmask", (5,), torch.bool),
        },
        "special": {"nan_inf": nan_inf_tensor(), "scalar": torch.tensor(1.5), "empty": torch.empty(0, 2)},
        "step": 7,
        "meta": {"name": "zstd", "lr": 0.1},
    }


def bad_source_state() -> dict:
    """Small single-rank DCP split over two data files (thread_count=2) for the bad/ cases. Keys
    are long and distinct so that "the error names the key" cannot pass by accident."""
    return {
        "layer.alpha_f32": rand("bad.a", (64, 64)),
        "layer.beta_bf16": rand("bad.b", (32,), torch.bfloat16),
        "counter.gamma_i64": rand("bad.c", (10,), torch.int64),
        "nested": {"delta_f16": rand("bad.d", (5, 5), torch.float16), "epsilon_f32": rand("bad.e", (48, 16))},
        "step_count": 3,
        "source_name": "bad-source",
    }


# --- Megatron torch_dist: torch ShardedTensors, flatten_state_dict=False, raw BytesIO objects --

class MCoreStyleSavePlanner(DefaultSavePlanner):
    """Megatron's MCoreSavePlanner passes BytesIO items through untouched: the ShardedObject
    payload is already `torch.save([obj])` bytes."""

    def transform_object(self, write_item, object):
        if isinstance(object, io.BytesIO):
            return object
        return super().transform_object(write_item, object)


def sharded_tensor(full: torch.Tensor, boxes_by_rank: dict[int, list[tuple[list, list]]], rank: int):
    """A torch ShardedTensor whose local shards are the boxes this rank owns (several per rank
    for stacked layers, none for ranks that hold no main replica), built the way Megatron does:
    global metadata on every rank, no communication."""
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard as STShard
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata
    from torch.distributed._shard.sharded_tensor.metadata import TensorProperties as STProps

    shards_md, local = [], []
    for r, boxes in sorted(boxes_by_rank.items()):
        for offsets, sizes in boxes:
            md = ShardMetadata(shard_offsets=list(offsets), shard_sizes=list(sizes), placement=f"rank:{r}/cpu")
            shards_md.append(md)
            if r == rank:
                data = full
                for d, (o, s) in enumerate(zip(offsets, sizes)):
                    data = data.narrow(d, o, s)
                local.append(STShard(data.contiguous(), md))
    gmd = ShardedTensorMetadata(shards_metadata=shards_md, size=full.shape,
                                tensor_properties=STProps(dtype=full.dtype))
    return ShardedTensor._init_from_local_shards_and_global_metadata(local, gmd)


# The Transformer Engine modules of a dense layer in Megatron's TE spec, each with an _extra_state.
TE_DENSE_MODULES = ("self_attention.core_attention", "self_attention.linear_qkv",
                    "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def megatron_torch_dist_state(rank: int, tp: int = 2, layers: int = 2) -> dict:
    h, qkv, ffn, vocab = 16, 48, 32, 64

    def stacked(name, shape, dtype, tp_dim):
        """[L, ...] with one chunk per layer per TP rank; tp_dim=None -> replica held by rank 0."""
        full = rand(name, (layers, *shape), dtype)
        boxes = {r: [] for r in range(tp)}
        for l in range(layers):
            if tp_dim is None:
                boxes[0].append(([l] + [0] * len(shape), [1, *shape]))
                continue
            step = shape[tp_dim] // tp
            for r in range(tp):
                off = [l] + [0] * len(shape)
                size = [1, *shape]
                off[1 + tp_dim], size[1 + tp_dim] = r * step, step
                boxes[r].append((off, size))
        return sharded_tensor(full, boxes, rank)

    def swiglu_fc1(name, dtype):
        # [W_full ; V_full] on dim 1: TP rank r owns fragment r of W and fragment r of V.
        full = rand(name, (layers, 2 * ffn, h), dtype)
        step = ffn // tp
        boxes = {r: [] for r in range(tp)}
        for l in range(layers):
            for r in range(tp):
                boxes[r].append(([l, r * step, 0], [1, step, h]))
                boxes[r].append(([l, ffn + r * step, 0], [1, step, h]))
        return sharded_tensor(full, boxes, rank)

    def vocab_parallel(name, dtype):
        full = rand(name, (vocab, h), dtype)
        step = vocab // tp
        return sharded_tensor(full, {r: [([r * step, 0], [step, h])] for r in range(tp)}, rank)

    bf = torch.bfloat16
    sd = {
        "embedding.word_embeddings.weight": vocab_parallel("td.emb", bf),
        "decoder.layers.self_attention.linear_qkv.weight": stacked("td.qkv", (qkv, h), bf, 0),
        "decoder.layers.self_attention.linear_qkv.layer_norm_weight": stacked("td.ln1", (h,), bf, None),
        # RowParallel: [H, np·hn] = [16, 16] (4 heads of 4)
        "decoder.layers.self_attention.linear_proj.weight": stacked("td.proj", (h, h), bf, 1),
        "decoder.layers.mlp.linear_fc1.weight": swiglu_fc1("td.fc1", bf),
        "decoder.layers.mlp.linear_fc1.layer_norm_weight": stacked("td.ln2", (h,), bf, None),
        "decoder.layers.mlp.linear_fc2.weight": stacked("td.fc2", (h, ffn), bf, 1),
        "decoder.final_layernorm.weight": sharded_tensor(rand("td.fln", (h,), bf), {0: [([0], [h])]}, rank),
        "output_layer.weight": vocab_parallel("td.out", bf),
        # fully_reshardable distributed-optimizer state: fp32, same sharding as the model key.
        "optimizer.state.param.decoder.layers.self_attention.linear_qkv.weight":
            stacked("td.p.qkv", (qkv, h), torch.float32, 0),
        "optimizer.state.exp_avg.decoder.layers.self_attention.linear_qkv.weight":
            stacked("td.m.qkv", (qkv, h), torch.float32, 0),
        "optimizer.state.exp_avg_sq.decoder.layers.self_attention.linear_qkv.weight":
            stacked("td.v.qkv", (qkv, h), torch.float32, 0),
        "optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight": swiglu_fc1("td.m.fc1", torch.float32),
    }

    # ShardedObjects: BYTE_IO items named <key>/shard_<offsets>_<shape>, payload torch.save([obj]).
    def sharded_object(payload) -> io.BytesIO:
        buf = io.BytesIO()
        torch.save([payload], buf)
        return buf

    if rank == 0:
        sd["rng_state/shard_0.0_1.1"] = sharded_object([rng_state_dict(0)])
        # Every Transformer Engine module of Megatron's TE spec keeps an extra state.
        for m in TE_DENSE_MODULES:
            for l in range(layers):
                sd[f"decoder.layers.{m}._extra_state/shard_{l}_{layers}"] = sharded_object(None)
    return sd


def megatron_torch_dist_moe_state(rank: int, tp: int = 2) -> dict:
    """A small MoE GPT as Megatron saves it with `moe_layer_freq` given as a list: that forces
    non_homogeneous_layers, so every layer has its own key `decoder.layers.<global idx>.…` with no
    layer axis (docs/formats.md §5.3.2). Layer 0 is dense, layers 1-2 are MoE (4 routed experts with a
    prepended expert axis, one shared expert). EP = 1: every TP rank holds every expert, and like
    Megatron's per-expert ShardedTensors each expert is its own chunk (size 1 on the expert axis)."""
    h, qkv, ffn, vocab = 16, 48, 32, 64
    num_experts, moe_ffn, shared_ffn = 4, 8, 8
    moe_layer_freq = [0, 1, 1]

    def boxes(shape, how):
        """{rank: [(offsets, sizes)]}. how: None = replicated (main replica on rank 0);
        ("tp", d) = dim d split over the TP ranks; "swiglu" = dim 0 is [W; V], TP rank r owns
        fragment r and TP + r of the 2·TP grid. A leading "E" in `shape` is the expert axis."""
        experts = shape[0] == "E"
        inner = list(shape[1:] if experts else shape)
        prefixes = [([e], [1]) for e in range(num_experts)] if experts else [([], [])]
        out = {r: [] for r in range(tp)}
        for po, ps in prefixes:
            if how is None:
                out[0].append((po + [0] * len(inner), ps + inner))
            elif how == "swiglu":
                half = inner[0] // 2
                step = half // tp
                for r in range(tp):
                    out[r].append((po + [r * step, 0], ps + [step, inner[1]]))
                    out[r].append((po + [half + r * step, 0], ps + [step, inner[1]]))
            else:
                d = how[1]
                step = inner[d] // tp
                for r in range(tp):
                    off, size = [0] * len(inner), list(inner)
                    off[d], size[d] = r * step, step
                    out[r].append((po + off, ps + size))
        return out

    col, row = ("tp", 0), ("tp", 1)
    spec = [("embedding.word_embeddings.weight", (vocab, h), col)]
    for l, is_moe in enumerate(moe_layer_freq):
        p = f"decoder.layers.{l}"
        spec += [(f"{p}.self_attention.linear_qkv.layer_norm_weight", (h,), None),
                 (f"{p}.self_attention.linear_qkv.weight", (qkv, h), col),
                 (f"{p}.self_attention.linear_proj.weight", (h, h), row)]
        if not is_moe:
            spec += [(f"{p}.mlp.linear_fc1.layer_norm_weight", (h,), None),
                     (f"{p}.mlp.linear_fc1.weight", (2 * ffn, h), "swiglu"),
                     (f"{p}.mlp.linear_fc2.weight", (h, ffn), row)]
        else:
            spec += [(f"{p}.pre_mlp_layernorm.weight", (h,), None),
                     (f"{p}.mlp.router.weight", (num_experts, h), None),
                     (f"{p}.mlp.experts.experts.linear_fc1.weight", ("E", 2 * moe_ffn, h), "swiglu"),
                     (f"{p}.mlp.experts.experts.linear_fc2.weight", ("E", h, moe_ffn), ("tp", 1)),
                     (f"{p}.mlp.shared_experts.linear_fc1.weight", (2 * shared_ffn, h), "swiglu"),
                     (f"{p}.mlp.shared_experts.linear_fc2.weight", (h, shared_ffn), row)]
    spec += [("decoder.final_layernorm.weight", (h,), None),
             ("output_layer.weight", (vocab, h), col)]

    def full_shape(shape):
        return tuple(num_experts if n == "E" else n for n in shape)

    sd = {}
    for key, shape, how in spec:
        sd[key] = sharded_tensor(rand(f"tdm.{key}", full_shape(shape), torch.bfloat16), boxes(shape, how), rank)
    # fully_reshardable distributed-optimizer state: fp32, same sharding as the model key.
    for state in ("param", "exp_avg", "exp_avg_sq"):
        for key, shape, how in spec:
            full = rand(f"tdm.{state}.{key}", full_shape(shape), torch.float32)
            if state == "exp_avg_sq":
                full = full.abs()  # second moments are non-negative
            sd[f"optimizer.state.{state}.{key}"] = sharded_tensor(full, boxes(shape, how), rank)

    def sharded_object(payload) -> io.BytesIO:
        buf = io.BytesIO()
        torch.save([payload], buf)
        return buf

    if rank == 0:
        sd["rng_state/shard_0.0_1.1"] = sharded_object([rng_state_dict(0)])
        for l, is_moe in enumerate(moe_layer_freq):  # per-layer keys: no axis -> shard_0_1
            modules = [m for m in TE_DENSE_MODULES if not (is_moe and m.startswith("mlp."))]
            if is_moe:  # the shared experts' TE linears
                modules += ["mlp.shared_experts.linear_fc1", "mlp.shared_experts.linear_fc2"]
            for m in modules:
                sd[f"decoder.layers.{l}.{m}._extra_state/shard_0_1"] = sharded_object(None)
            # The routed experts' grouped linears, one extra state per GEMM on the expert axis
            # (TEGroupedLinear._sharded_state_dict_grouped): <key>/shard_<e>_<experts>.
            for fc in ("linear_fc1", "linear_fc2") if is_moe else ():
                for e in range(num_experts):
                    key = f"decoder.layers.{l}.mlp.experts.experts.{fc}._extra_state"
                    sd[f"{key}/shard_{e}_{num_experts}"] = sharded_object(None)
    return sd


# --- Megatron-FSDP fsdp_dtensor: uneven row-aligned DTensor chunks via DCP's chunk hooks -------

def uneven_dtensor(local: torch.Tensor, mesh, global_shape, row_offset: int) -> DTensor:
    """A Shard(0) DTensor whose local rows start at `row_offset` (not torch.chunk layout).
    Like Megatron-FSDP's uneven_dtensor.py, the true chunk is handed to DCP through the
    __create_chunk_list__ / __create_write_items__ hooks on the local tensor; an empty piece
    writes nothing."""
    global_shape = torch.Size(global_shape)
    stride = torch.empty(global_shape, device="meta").stride()
    dt = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=global_shape, stride=stride)
    lt = dt._local_tensor
    chunk = ChunkStorageMetadata(offsets=torch.Size([row_offset] + [0] * (len(global_shape) - 1)),
                                 sizes=lt.shape)

    def create_write_items(fqn, obj):
        if lt.numel() == 0:
            return []
        return [WriteItem(index=MetadataIndex(fqn, chunk.offsets), type=WriteItemType.SHARD,
                          tensor_data=TensorWriteData(chunk=chunk,
                                                      properties=TensorProperties.create_from_tensor(lt),
                                                      size=global_shape))]

    lt.__create_write_items__ = create_write_items
    lt.__create_chunk_list__ = lambda: [chunk]
    return dt


def megatron_fsdp_state(rank: int, mesh, dp: int = 2, layers: int = 2) -> dict:
    h, qkv, ffn, vocab = 16, 64, 40, 50
    # Megatron-FSDP buckets (one flat buffer each), parameters in buffer order.
    buckets = [[("embedding.word_embeddings.weight", (vocab, h))]]
    for l in range(layers):
        p = f"decoder.layers.{l}"
        buckets.append([(f"{p}.self_attention.linear_qkv.layer_norm_weight", (h,)),
                        (f"{p}.self_attention.linear_qkv.weight", (qkv, h)),
                        (f"{p}.self_attention.linear_proj.weight", (h, h)),
                        (f"{p}.mlp.linear_fc1.layer_norm_weight", (h,)),
                        (f"{p}.mlp.linear_fc1.weight", (2 * ffn, h)),
                        (f"{p}.mlp.linear_fc2.weight", (h, ffn))])
    buckets.append([("output_layer.weight", (vocab, h)), ("decoder.final_layernorm.weight", (h,))])

    # Within a bucket, items start on multiples of the chunk-size factor (lcm of row sizes) and
    # the buffer is padded to dp * factor, so each rank's equal share starts and ends on row
    # boundaries of every parameter: the resulting chunks are uneven, and a rank may hold none
    # of a parameter. `layout` maps fqn -> (shape, [lo, hi) of this rank relative to the param).
    layout = {}
    for bucket in buckets:
        factor = math.lcm(*[math.prod(s[1:]) for _, s in bucket])
        starts, pos = [], 0
        for _, s in bucket:
            starts.append(pos)
            pos += -(-math.prod(s) // factor) * factor
        share = -(-pos // (dp * factor)) * factor
        for (fqn, shape), start in zip(bucket, starts):
            layout[fqn] = (shape, rank * share - start, (rank + 1) * share - start)

    def pieces(fqn, tag):
        """{on-disk key suffix: DTensor} for one parameter (fc1 split into _w / _v, §6.3)."""
        shape, lo, hi = layout[fqn]
        full = rand(f"fsdp.{tag}.{fqn}", shape)
        if tag == "exp_avg_sq":
            full = full.abs()  # second moments are non-negative
        row = math.prod(shape[1:])
        a, b = min(max(lo, 0), full.numel()), min(max(hi, 0), full.numel())
        sections = [("", 0, shape[0])]
        if fqn.endswith("mlp.linear_fc1.weight"):
            sections = [("_w", 0, shape[0] // 2), ("_v", shape[0] // 2, shape[0] // 2)]
        out = {}
        for suffix, r0, rows in sections:
            s0, s1 = max(a, r0 * row), min(b, (r0 + rows) * row)
            if s1 <= s0:
                s0 = s1 = r0 * row
            local = full.reshape(-1)[s0:s1].reshape(-1, *shape[1:]).clone()
            out[suffix] = uneven_dtensor(local, mesh, (rows, *shape[1:]), s0 // row - r0)
        return out

    model, opt_state, group_meta = {}, {}, {}
    for fqn in layout:
        param, exp_avg, exp_avg_sq = (pieces(fqn, tag) for tag in ("param", "exp_avg", "exp_avg_sq"))
        for suffix, dt in param.items():
            model[f"module.{fqn}{suffix}"] = dt
            name = f"module.module.module.{fqn}{suffix}"
            opt_state[name] = {"exp_avg": exp_avg[suffix], "exp_avg_sq": exp_avg_sq[suffix],
                               "step": torch.tensor(50.0)}
            wd = 0.0 if fqn.endswith(("layer_norm_weight", "final_layernorm.weight")) else 0.1
            group_meta[name] = {"lr": 3e-4, "min_lr": 3e-5, "weight_decay": wd, "betas": (0.9, 0.95),
                                "eps": 1e-8, "wd_mult": 1.0, "lr_mult": 1.0,
                                "is_expert_parallel": False, "is_decoupled_lr": False}
    return {
        "model": model,
        "optimizer": {"state": opt_state, "param_to_group_meta": group_meta},
        "args": make_namespace(use_megatron_fsdp=True, ckpt_format="fsdp_dtensor"),
        "checkpoint_version": 3.0,
        "iteration": 50,
        "opt_param_scheduler": {"max_lr": 3e-4, "min_lr": 3e-5, "num_steps": 400, "warmup_steps": 10,
                                "decay_style": "cosine"},
        "num_floating_point_operations_so_far": 1.5e12,
        "rng_state": {"(0, 0)": [rng_state_dict(i) for i in range(dp)]},
    }


def dcp_worker(rank: int, world: int, port: int, jobs: list[tuple[str, str]]) -> None:
    """One gloo rank; writes every (fixture kind, output dir) job for this world size."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        mesh2d = init_device_mesh("cpu", (2, 2)) if world == 4 else None
        for kind, out in jobs:
            if kind == "generic":
                dcp.save(generic_state(world, mesh, mesh2d), storage_writer=FileSystemWriter(out))
            elif kind == "zstd":
                dcp.save(zstd_state(mesh), storage_writer=FileSystemWriter(out, _extensions=[ZStandard()]))
            elif kind == "bad_source":
                dcp.save(bad_source_state(), storage_writer=FileSystemWriter(out, thread_count=2))
            elif kind == "torch_dist":
                dcp.save(megatron_torch_dist_state(rank, tp=world), storage_writer=FileSystemWriter(out),
                         planner=MCoreStyleSavePlanner(flatten_state_dict=False))
            elif kind == "torch_dist_moe":
                dcp.save(megatron_torch_dist_moe_state(rank, tp=world), storage_writer=FileSystemWriter(out),
                         planner=MCoreStyleSavePlanner(flatten_state_dict=False))
            elif kind == "fsdp_dtensor":
                dcp.save(megatron_fsdp_state(rank, mesh, dp=world), storage_writer=FileSystemWriter(out))
            elif kind == "rank_local":
                # Saved without collectives: every rank writes its own __<rank>.metadata.
                full = rand("rank_local.w", (9, 6))
                sd = {"w": distribute_tensor(full, mesh, [Shard(0)]),
                      "shared": rand("rank_local.shared", (4,)),  # written by both ranks
                      f"rank{rank}.only": torch.full((3,), float(rank))}
                dcp.save(sd, storage_writer=FileSystemWriter(out), use_collectives=False)
                if rank == 0:  # the whole tensor, for comparing what the reader assembles
                    torch.save({"w": full}, Path(out).parent / "rank_local_reference.pt")
            else:
                raise ValueError(kind)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world: int, jobs: list[tuple[str, str]], timeout_s: float = 120.0) -> None:
    # fork: the parent has imported torch but run no kernels yet, so children skip the ~3 s
    # re-import that spawn costs per rank (2 cores, 7 ranks in total).
    if Path("/sys/class/net/lo").exists():
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # no reliance on hostname resolution
    for attempt in range(3):  # a free port can be taken between probe and bind; retry
        ctx = mp.start_processes(dcp_worker, args=(world, free_port(), jobs), nprocs=world,
                                 join=False, start_method="fork")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=1):
                if time.monotonic() > deadline:  # a wedged collective must not hang the build
                    raise TimeoutError(f"{world}-rank DCP writers still running after {timeout_s:.0f} s")
            return
        except mp.ProcessRaisedException as e:
            if "address already in use" not in str(e).lower() or attempt == 2:
                raise
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()


# ---------------------------------------------------------------------------------------------
# Single-process fixtures
# ---------------------------------------------------------------------------------------------

def torchsave_object(dtypes=ALL_DTYPES) -> dict:
    shared = rand("ts.shared", (10, 3))
    param = torch.nn.Parameter(rand("ts.param", (4, 4)))
    return {
        "dtypes": {DTYPE_NAME[dt]: rand(f"ts.{DTYPE_NAME[dt]}", (3, 5), dt) for dt in dtypes},
        "layout": {
            "noncontig": rand("ts.nc", (5, 7)).t(),
            "view_a": shared[1:4],   # two views of one storage at different storage offsets
            "view_b": shared[6:],
            "param": param,
            "scalar": torch.tensor(-1.75, dtype=torch.float64),
            "empty": torch.empty(0, 3, dtype=torch.float16),
        },
        "special": {"nan_inf": nan_inf_tensor(), "denormal_f32": denormal_f32(), "denormal_f16": denormal_f16()},
        "list": [rand("ts.l0", (2,)), {"y": rand("ts.ly", (3,), torch.int16)}],
        "meta": {"epoch": 3, "name": "torchsave-fixture", "args": make_namespace(),
                 "blob": b"\x00\x01\xfe\xffbinary", "pair": (1, 2.0), "none": None},
    }


def write_torchsave(out: Path) -> None:
    out.mkdir(parents=True)
    torch.save(torchsave_object(), out / "model.pt")


# The dtypes torch's legacy (non-zip) writer can store: those with a typed storage class.
LEGACY_DTYPES = [dt for dt in ALL_DTYPES if not dt.is_floating_point or dt.itemsize > 1]


def write_torchsave_legacy(out: Path) -> None:
    """torch.save's legacy stream (torch < 1.6; `_use_new_zipfile_serialization=False` since):
    model.pt from torch itself; views.pt with what only older writers made, storage views
    (view_metadata) and a big-endian host's system info, built with pickle as their writers laid
    it out and checked here to load in torch."""
    out.mkdir(parents=True)
    torch.save(torchsave_object(LEGACY_DTYPES), out / "model.pt", _use_new_zipfile_serialization=False)

    base = {"f32": rand("lv.f32", (24,)), "i64": rand("lv.i64", (6,), torch.int64),
            "bf16": rand("lv.bf16", (8,), torch.bfloat16)}

    class Storage:  # a persistent id, as _legacy_save's persistent_id returned it
        def __init__(self, key, tensor, view=None):
            self.key, self.tensor, self.view = key, tensor, view

    class Rebuild:  # a tensor, as Tensor.__reduce_ex__ gave it: _rebuild_tensor_v2(...)
        def __init__(self, storage, offset, size, stride, v2=True):
            self.args, self.v2 = (storage, offset, size, stride), v2

        def __reduce__(self):  # torch < 0.4: _rebuild_tensor(storage, offset, size, stride)
            if not self.v2:
                return (torch._utils._rebuild_tensor, self.args)
            return (torch._utils._rebuild_tensor_v2, self.args + (False, OrderedDict()))

    class Writer(pickle.Pickler):
        def persistent_id(self, obj):
            if not isinstance(obj, Storage):
                return None
            t = obj.tensor
            storage_type = getattr(torch, {torch.float32: "FloatStorage", torch.int64: "LongStorage",
                                           torch.bfloat16: "BFloat16Storage"}[t.dtype])
            return ("storage", storage_type, obj.key, "cpu", t.numel(), obj.view)

    f32, i64, bf16 = (Storage(k, base[k]) for k in ("f32", "i64", "bf16"))
    objects = {
        "whole": Rebuild(f32, 0, (4, 6), (6, 1)),
        # (view key, offset, size) in elements of the root storage: views 1 and 2 of f32.
        "view_rows": Rebuild(Storage("f32", base["f32"], ("f32.v1", 6, 12)), 0, (2, 6), (6, 1)),
        "view_tail": Rebuild(Storage("f32", base["f32"], ("f32.v2", 18, 6)), 1, (5,), (1,)),
        "view_strided": Rebuild(Storage("f32", base["f32"], ("f32.v1", 6, 12)), 2, (3, 2), (3, 1)),
        "long": Rebuild(i64, 0, (2, 3), (3, 1)),
        "pre_v2": Rebuild(i64, 3, (3,), (1,), v2=False),
        "bf16_t": Rebuild(bf16, 0, (4, 2), (1, 4)),
    }
    with open(out / "views.pt", "wb") as f:
        for head in (0x1950A86A20F9469CFC6C, 1001,
                     {"protocol_version": 1001, "little_endian": False,
                      "type_sizes": {"short": 2, "int": 4, "long": 8}}):
            pickle.dump(head, f, protocol=2)
        Writer(f, protocol=2).dump(objects)
        keys = sorted(base)
        pickle.dump(keys, f, protocol=2)
        for k in keys:  # element count then bytes, little-endian as torch wrote them
            f.write(struct.pack("<q", base[k].numel()))
            f.write(base[k].view(torch.uint8).numpy().tobytes())
    write_torchsave_tar(out / "tar.pt", base)
    loaded = torch.load(out / "views.pt", weights_only=True)
    flat = base["f32"]
    assert torch.equal(loaded["view_rows"], flat[6:18].view(2, 6))
    assert torch.equal(loaded["view_tail"], flat[19:24])
    assert torch.equal(loaded["view_strided"], flat[8:18].as_strided((3, 2), (3, 1)))
    assert torch.equal(loaded["bf16_t"], base["bf16"].as_strided((4, 2), (1, 4)))
    assert torch.equal(loaded["pre_v2"], base["i64"][3:])


def write_safetensors(out: Path, sharded_out: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    tensors = {f"dtype.{k}": v for k, v in dtype_tensors("st", (4, 3)).items()}
    tensors.update({
        "special.nan_inf": nan_inf_tensor(),
        "special.denormal_f16": denormal_f16(),
        "special.scalar": torch.tensor(2.0, dtype=torch.bfloat16),
        "special.empty": torch.empty(0, 5),
        "special.empty_bool": torch.empty(3, 0, dtype=torch.bool),
    })
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})

    # Sharded the way transformers writes it: shard files plus an index with total_size in bytes.
    sharded_out.mkdir(parents=True)
    layers = {}
    for l in range(3):
        p = f"model.layers.{l}"
        layers[f"{p}.self_attn.q_proj.weight"] = rand(f"sh.{p}.q", (16, 16), torch.bfloat16)
        layers[f"{p}.self_attn.k_proj.weight"] = rand(f"sh.{p}.k", (8, 16), torch.bfloat16)
        layers[f"{p}.mlp.gate_proj.weight"] = rand(f"sh.{p}.g", (24, 16), torch.bfloat16)
        layers[f"{p}.input_layernorm.weight"] = rand(f"sh.{p}.ln", (16,), torch.float32)
    layers["model.embed_tokens.weight"] = rand("sh.emb", (32, 16), torch.bfloat16)
    layers["lm_head.weight"] = rand("sh.head", (32, 16), torch.bfloat16)
    names = sorted(layers)
    files = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map, total = {}, 0
    for fname, keys in files.items():
        save_file({k: layers[k] for k in keys}, str(sharded_out / fname), metadata={"format": "pt"})
        for k in keys:
            weight_map[k] = fname
            total += layers[k].numel() * layers[k].element_size()
    (sharded_out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")


def write_torchsave_tar(path: Path, base: dict[str, torch.Tensor]) -> None:
    """The tar format of torch < 0.4, laid out as torch.serialization's legacy_load reads it
    (members storages, tensors, pickle, sys_info), checked here to load in torch."""
    import tarfile
    keys = {name: 100 + i for i, name in enumerate(base)}  # storage keys
    storage_types = {torch.float32: torch.FloatStorage, torch.int64: torch.LongStorage,
                     torch.bfloat16: torch.BFloat16Storage}
    tensor_types = {torch.float32: torch.FloatTensor, torch.int64: torch.LongTensor,
                    torch.bfloat16: torch.BFloat16Tensor}
    storages = io.BytesIO()
    pickle.dump(len(base), storages, protocol=2)
    for name, t in base.items():
        pickle.dump((keys[name], "cpu", storage_types[t.dtype]), storages, protocol=2)
        storages.write(struct.pack("<q", t.numel()) + t.view(torch.uint8).numpy().tobytes())
    pickle.dump([(200, keys["f32"], 6, 12)], storages, protocol=2)  # a view of f32's rows 1-2
    tensors = io.BytesIO()
    # (key, storage, size, stride, offset)
    views = [(1, keys["f32"], (4, 6), (6, 1), 0), (2, 200, (2, 3), (1, 2), 1),
             (3, keys["i64"], (3,), (2,), 0), (4, keys["bf16"], (8,), (1,), 0)]
    pickle.dump(len(views), tensors, protocol=2)
    dtype_of = {keys[n]: t.dtype for n, t in base.items()} | {200: torch.float32}
    for key, storage, size, stride, offset in views:
        pickle.dump((key, storage, tensor_types[dtype_of[storage]]), tensors, protocol=2)
        tensors.write(struct.pack("<ii", len(size), 0) + struct.pack(f"<{len(size)}q", *size) +
                      struct.pack(f"<{len(size)}q", *stride) + struct.pack("<q", offset))

    class Ref:  # a tensor in the object pickle: its key, as a persistent id
        def __init__(self, key):
            self.key = key

    class Writer(pickle.Pickler):
        def persistent_id(self, obj):
            return str(obj.key) if isinstance(obj, Ref) else None

    objects = io.BytesIO()
    Writer(objects, protocol=2).dump({"whole": Ref(1), "view_t": Ref(2), "longs": Ref(3),
                                      "bf16": Ref(4), "epoch": 7})
    sys_info = pickle.dumps({"protocol_version": 1001, "little_endian": True,
                             "type_sizes": {"short": 2, "int": 4, "long": 8}}, protocol=2)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("sys_info", sys_info), ("pickle", objects.getvalue()),
                           ("tensors", tensors.getvalue()), ("storages", storages.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    loaded = torch.load(path, weights_only=False)  # our own file: torch reads tars only so
    flat = base["f32"]
    assert torch.equal(loaded["whole"], flat.view(4, 6))
    assert torch.equal(loaded["view_t"], flat[6:18].clone().as_strided((2, 3), (1, 2), 1))
    assert torch.equal(loaded["longs"], base["i64"].as_strided((3,), (2,)))
    assert torch.equal(loaded["bf16"], base["bf16"])


def write_megatron_legacy(root: Path, tp: int = 2, layers: int = 2, zip_format: bool = True) -> None:
    """torch-format Megatron: one torch.save per TP rank holding TP-local shards (with
    zip_format=False, in torch's legacy stream, as Megatron wrote them before torch 1.6)."""
    h, ffn, vocab, it = 16, 32, 64, 10
    bf = torch.bfloat16
    (root / "latest_checkpointed_iteration.txt").parent.mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text(str(it))
    full = {"embedding.word_embeddings.weight": (rand("lg.emb", (vocab, h), bf), 0),
            "decoder.final_layernorm.weight": (rand("lg.fln", (h,), bf), None),
            "output_layer.weight": (rand("lg.out", (vocab, h), bf), 0)}
    for l in range(layers):
        p = f"decoder.layers.{l}"
        full[f"{p}.self_attention.linear_qkv.layer_norm_weight"] = (rand(f"lg.{p}.ln1", (h,), bf), None)
        full[f"{p}.self_attention.linear_qkv.weight"] = (rand(f"lg.{p}.qkv", (3 * h, h), bf), 0)
        full[f"{p}.self_attention.linear_proj.weight"] = (rand(f"lg.{p}.proj", (h, 3 * h), bf), 1)
        full[f"{p}.mlp.linear_fc1.layer_norm_weight"] = (rand(f"lg.{p}.ln2", (h,), bf), None)
        full[f"{p}.mlp.linear_fc1.weight"] = (rand(f"lg.{p}.fc1", (2 * ffn, h), bf), "swiglu")
        full[f"{p}.mlp.linear_fc2.weight"] = (rand(f"lg.{p}.fc2", (h, ffn), bf), 1)
    for r in range(tp):
        model = OrderedDict()  # a real state_dict(): pickled via collections.OrderedDict
        for k, (t, how) in full.items():
            if how is None:
                model[k] = t.clone()
            elif how == "swiglu":  # TP-local [W_r ; V_r]
                w, v = t.chunk(2, 0)
                model[k] = torch.cat([w.chunk(tp, 0)[r], v.chunk(tp, 0)[r]]).clone()
            else:
                model[k] = t.chunk(tp, how)[r].clone()
        model["decoder.layers.0.self_attention.linear_qkv._extra_state"] = None
        fp32 = [model[k].float() for k in list(model)[:2]]
        ckpt = {
            "args": make_namespace(tensor_model_parallel_size=tp, ckpt_format="torch"),
            "checkpoint_version": 3.0,
            "iteration": it,
            "model": model,
            "optimizer": {"optimizer": {"param_groups": [{"lr": 3e-4, "weight_decay": 0.1, "params": [0, 1]}]},
                          "fp32_from_fp16_params": [fp32]},
            "opt_param_scheduler": {"max_lr": 3e-4, "num_steps": it * 8},
            "rng_state": [rng_state_dict(r)],
            "num_floating_point_operations_so_far": 1.0e9,
        }
        d = root / f"iter_{it:07d}" / f"mp_rank_{r:02d}"
        d.mkdir(parents=True)
        torch.save(ckpt, d / "model_optim_rng.pt", _use_new_zipfile_serialization=zip_format)


def finish_megatron_torch_dist(root: Path, it: int, args: argparse.Namespace | None = None) -> None:
    root.joinpath("latest_checkpointed_iteration.txt").write_text(str(it))
    it_dir = root / f"iter_{it:07d}"
    it_dir.joinpath("metadata.json").write_text(json.dumps(
        {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
         "common_backend": "torch", "common_backend_version": 1}))
    # The model's own sizes too, as Megatron saves them: `layout --from-config` reads them.
    if args is None:
        args = make_namespace(tensor_model_parallel_size=2, ckpt_format="torch_dist",
                              ffn_hidden_size=32, padded_vocab_size=64, kv_channels=4,
                              group_query_attention=False, num_query_groups=4,
                              untie_embeddings_and_output_weights=True)
    torch.save({"args": args,
                "iteration": it, "checkpoint_version": 3.0,
                "content_metadata": {"distrib_optim_sharding_type": "fully_reshardable",
                                     "singleton_local_shards": False}},
               it_dir / "common.pt")


# ---------------------------------------------------------------------------------------------
# Hostile inputs
# ---------------------------------------------------------------------------------------------

def st_file(header: dict | bytes, data: bytes, header_len: int | None = None) -> bytes:
    hdr = header if isinstance(header, bytes) else json.dumps(header).encode()
    hdr += b" " * (-len(hdr) % 8)
    return struct.pack("<Q", len(hdr) if header_len is None else header_len) + hdr + data


def write_bad(bad: Path, src_dcp: Path, good_pt: Path, legacy_pt: Path) -> None:
    bad.mkdir(parents=True)
    cases: dict[str, dict] = {}

    def case(name, path, exit_code, needles):
        cases[name] = {"path": path, "expect_exit": exit_code, "expect_in_error": needles}

    md = dcp.FileSystemReader(str(src_dcp)).read_metadata()
    files: dict[str, list[tuple[str, int, int]]] = {}
    for idx, info in md.storage_data.items():
        files.setdefault(info.relative_path, []).append((idx.fqn, info.offset, info.length))

    def copy_src(name):
        d = bad / name
        shutil.copytree(src_dcp, d)
        return d

    # .metadata cut in half: the pickle ends mid-stream.
    d = copy_src("metadata_truncated")
    raw = (d / ".metadata").read_bytes()
    (d / ".metadata").write_bytes(raw[: len(raw) // 2])
    case("metadata_truncated", "metadata_truncated", 2, [".metadata"])

    # Pickles that must never be executed or blindly recursed. Hand-assembled opcodes.
    def meta_only(name, payload):
        (bad / name).mkdir()
        (bad / name / ".metadata").write_bytes(payload)

    cmd = b"echo pwned"
    meta_only("metadata_os_system",  # PROTO 4, GLOBAL 'os system', SHORT_BINUNICODE, TUPLE1, REDUCE
              b"\x80\x04cos\nsystem\n\x8c" + bytes([len(cmd)]) + cmd + b"\x85R.")
    case("metadata_os_system", "metadata_os_system", 2, [".metadata", "system"])
    meta_only("metadata_posix_system_stack_global",  # same call through STACK_GLOBAL 'posix' 'system'
              b"\x80\x04\x8c\x05posix\x8c\x06system\x93\x8c" + bytes([len(cmd)]) + cmd + b"\x85R.")
    case("metadata_posix_system_stack_global", "metadata_posix_system_stack_global", 2, [".metadata", "system"])
    depth = 100_000  # EMPTY_LIST x depth, then APPEND x (depth-1): lists nested depth deep
    meta_only("metadata_deep_nesting", b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b".")
    case("metadata_deep_nesting", "metadata_deep_nesting", 2, [".metadata"])
    meta_only("metadata_self_reference", b"\x80\x04]\x94h\x00a.")  # l = []; l.append(l)
    case("metadata_self_reference", "metadata_self_reference", 2, [".metadata"])

    # A storage entry whose data file name leaves the checkpoint directory: refused, naming the
    # file, the key and the offset (written by torch's own pickling of the edited Metadata).
    d = copy_src("metadata_path_escape")
    escaped = dcp.FileSystemReader(str(d)).read_metadata()
    idx = next(iter(escaped.storage_data))
    escaped.storage_data[idx].relative_path = "../outside.distcp"
    with open(d / ".metadata", "wb") as f:
        pickle.dump(escaped, f)
    case("metadata_path_escape", "metadata_path_escape", 2,
         [".metadata", "leaves the checkpoint directory", idx.fqn, "offset"])

    # storage_data without a tensor's chunk and an object, and with an item for a key that
    # state_dict_metadata lacks: the checkpoint opens, and exactly the two keys whose bytes
    # torch's reader could not find (a KeyError in read_data) are unreadable.
    d = copy_src("metadata_storage_gaps")
    gaps = dcp.FileSystemReader(str(d)).read_metadata()
    dropped = []
    for want_object in (False, True):
        idx = next(i for i in gaps.storage_data
                   if isinstance(gaps.state_dict_metadata[i.fqn], BytesStorageMetadata) == want_object)
        dropped.append(idx.fqn)
        del gaps.storage_data[idx]
    ghost = next(iter(gaps.storage_data.values()))
    gaps.storage_data[MetadataIndex("ghost.key.without.metadata")] = ghost
    with open(d / ".metadata", "wb") as f:
        pickle.dump(gaps, f)
    case("metadata_storage_gaps", "metadata_storage_gaps", 1, dropped)
    cases["metadata_storage_gaps"]["expect_unreadable"] = sorted(dropped)

    # One data file missing / truncated: the checkpoint opens, the affected keys are broken.
    victim = max(files, key=lambda f: len(files[f]))
    d = copy_src("distcp_missing")
    (d / victim).unlink()
    case("distcp_missing", "distcp_missing", 1, [victim] + sorted({k for k, _, _ in files[victim]}))
    cases["distcp_missing"]["expect_unreadable"] = sorted({k for k, _, _ in files[victim]})

    d = copy_src("distcp_truncated")
    size = (d / victim).stat().st_size
    cut = size // 2
    with open(d / victim, "r+b") as f:
        f.truncate(cut)
    cut_keys = sorted({k for k, off, ln in files[victim] if off + ln > cut})
    case("distcp_truncated", "distcp_truncated", 1, [victim] + cut_keys)
    cases["distcp_truncated"]["expect_unreadable"] = cut_keys

    # torch.save zips.
    pt = good_pt.read_bytes()
    (bad / "pt_truncated.pt").write_bytes(pt[: len(pt) // 2])
    case("pt_truncated", "pt_truncated.pt", 2, ["pt_truncated.pt"])

    huge = bytearray(pt)
    eocd = huge.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", huge, eocd + 8, 0xFFFF, 0xFFFF)  # entries on disk / total (-> ZIP64)
    z64 = huge.rfind(b"PK\x06\x06")
    if z64 >= 0:  # torch always writes ZIP64: claim 2^62 entries there as well
        struct.pack_into("<QQ", huge, z64 + 24, 1 << 62, 1 << 62)
    (bad / "pt_huge_cd_count.pt").write_bytes(bytes(huge))
    case("pt_huge_cd_count", "pt_huge_cd_count.pt", 2, ["pt_huge_cd_count.pt"])

    # A real torch archive (torch's own zip writer) whose data.pkl calls builtins.eval.
    src = b"__import__('os').system('echo pwned')"
    evil = b"\x80\x02cbuiltins\neval\nX" + struct.pack("<I", len(src)) + src + b"\x85R."
    w = torch._C.PyTorchFileWriter(str(bad / "pt_builtins_eval.pt"))
    w.write_record("data.pkl", evil, len(evil))
    w.write_record(".format_version", b"1", 1)
    w.write_record("byteorder", b"little", 6)
    w.write_end_of_file()
    case("pt_builtins_eval", "pt_builtins_eval.pt", 2, ["pt_builtins_eval.pt", "eval"])

    # torch.save legacy streams: cut in the storages, a count that disagrees, a wrong magic number.
    raw = legacy_pt.read_bytes()
    f = io.BytesIO(raw)
    for _ in range(5):  # past the magic, version, sys info, objects and storage keys
        for _op in pickletools.genops(f):
            pass
    # Cut inside a storage's bytes. One storage only: the storages' order follows their keys (ids),
    # so in the many-storage file a cut could land in an empty storage's count instead.
    one = io.BytesIO()
    torch.save({"w": torch.arange(64.0)}, one, _use_new_zipfile_serialization=False)
    (bad / "legacy_truncated.pt").write_bytes(one.getvalue()[:-40])
    case("legacy_truncated", "legacy_truncated.pt", 2, ["legacy_truncated.pt", "unexpected end of file"])
    wrong = bytearray(raw)
    struct.pack_into("<q", wrong, f.tell(), struct.unpack_from("<q", raw, f.tell())[0] + 1)
    (bad / "legacy_wrong_size.pt").write_bytes(bytes(wrong))
    case("legacy_wrong_size", "legacy_wrong_size.pt", 2, ["legacy_wrong_size.pt", "wrong byte size", "offset"])
    # torch < 0.4's tar without its tensors member.
    import tarfile
    with tarfile.open(bad / "legacy_tar.pt", "w", format=tarfile.PAX_FORMAT) as tar:
        for member in ("sys_info", "pickle", "storages"):
            data = (pickle.dumps(0, protocol=2) + pickle.dumps([], protocol=2)  # no storages
                    if member == "storages" else pickle.dumps({"protocol_version": 1001}, protocol=2))
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    case("legacy_tar", "legacy_tar.pt", 2, ["legacy_tar.pt", "'tensors' member"])
    (bad / "legacy_bad_magic.pt").write_bytes(raw[:4] + bytes([raw[4] ^ 1]) + raw[5:])
    case("legacy_bad_magic", "legacy_bad_magic.pt", 2, ["legacy_bad_magic.pt", "magic number"])

    # safetensors.
    good = {"good": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    body = rand("st.bad", (4,)).numpy().tobytes()
    blob = st_file(good, body)
    (bad / "st_header_too_long.safetensors").write_bytes(st_file(good, body, header_len=len(blob) + 1000))
    case("st_header_too_long", "st_header_too_long.safetensors", 2, ["st_header_too_long.safetensors"])
    (bad / "st_header_2p60.safetensors").write_bytes(st_file(good, body, header_len=1 << 60))
    case("st_header_2p60", "st_header_2p60.safetensors", 2, ["st_header_2p60.safetensors"])
    hdr = dict(good, **{"bad.past_end": {"dtype": "F32", "shape": [4, 4], "data_offsets": [16, 80]}})
    (bad / "st_offsets_past_end.safetensors").write_bytes(st_file(hdr, body + body))
    case("st_offsets_past_end", "st_offsets_past_end.safetensors", 1, ["bad.past_end", "offset"])
    hdr = dict(good, **{"bad.shape": {"dtype": "F32", "shape": [3, 3], "data_offsets": [16, 32]}})
    (bad / "st_shape_mismatch.safetensors").write_bytes(st_file(hdr, body + body))
    case("st_shape_mismatch", "st_shape_mismatch.safetensors", 1, ["bad.shape"])

    # Megatron roots whose tracker file cannot be followed.
    (bad / "megatron_missing_iter").mkdir()
    (bad / "megatron_missing_iter" / "latest_checkpointed_iteration.txt").write_text("999")
    case("megatron_missing_iter", "megatron_missing_iter", 2, ["iter_0000999"])
    (bad / "megatron_garbage_tracker").mkdir()
    (bad / "megatron_garbage_tracker" / "latest_checkpointed_iteration.txt").write_text("not-a-number\n")
    case("megatron_garbage_tracker", "megatron_garbage_tracker", 2, ["latest_checkpointed_iteration.txt"])

    (bad / "MANIFEST.json").write_text(json.dumps(cases, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------

def write_mcore_metadata(src: Path, dst: Path) -> None:
    """dcp_1rank's checkpoint with its .metadata re-pickled as Megatron-Core 0.15's
    MCoreMetadata (a Metadata subclass with an `mcore_data` field, docs/formats.md §5.3.4). The class
    is registered under Megatron's module path only in this process, as Megatron would have it."""
    import pickle
    import types
    from torch.distributed.checkpoint.metadata import Metadata

    shutil.copytree(src, dst)
    md = pickle.loads((src / ".metadata").read_bytes())  # our own file, written above
    names = "megatron.core.dist_checkpointing.strategies.torch".split(".")
    for i in range(1, len(names) + 1):
        sys.modules.setdefault(".".join(names[:i]), types.ModuleType(".".join(names[:i])))
    module = sys.modules[".".join(names)]

    class MCoreMetadata(Metadata):
        pass

    MCoreMetadata.__module__ = module.__name__
    MCoreMetadata.__qualname__ = "MCoreMetadata"
    module.MCoreMetadata = MCoreMetadata
    md2 = MCoreMetadata(**vars(md))
    md2.mcore_data = {"optimizer.state.exp_avg.w": {"nd_reformulated_orig_global_shape": (4, 8)}}
    (dst / ".metadata").write_bytes(pickle.dumps(md2))


def build(tmp: Path) -> None:
    scratch = tmp / ".scratch"
    t0 = time.monotonic()

    def log(msg):
        print(f"[make_fixtures {time.monotonic() - t0:5.1f}s] {msg}", file=sys.stderr, flush=True)

    # Distributed writers first, before this process runs any torch kernel (see run_world).
    run_world(1, [("generic", str(tmp / "dcp_1rank")), ("zstd", str(tmp / "dcp_zstd")),
                  ("bad_source", str(scratch / "bad_source"))])
    log("1-rank DCPs written")
    run_world(2, [("generic", str(tmp / "dcp_2ranks")),
                  ("rank_local", str(tmp / "rank_local" / "ckpt")),
                  ("torch_dist", str(tmp / "megatron_torch_dist" / "iter_0000100")),
                  ("fsdp_dtensor", str(tmp / "megatron_fsdp_dtensor" / "iter_0000050")),
                  ("torch_dist_moe", str(tmp / "megatron_torch_dist_moe" / "iter_0000100"))])
    log("2-rank DCPs written")
    run_world(4, [("generic", str(tmp / "dcp_4ranks"))])
    log("4-rank DCP written")

    write_mcore_metadata(tmp / "dcp_1rank", tmp / "megatron_mcore_metadata")
    finish_megatron_torch_dist(tmp / "megatron_torch_dist", 100)
    # moe_layer_freq as a list forces per-layer keys (non_homogeneous_layers, docs/formats.md §5.3.2).
    finish_megatron_torch_dist(tmp / "megatron_torch_dist_moe", 100, make_namespace(
        num_layers=3, hidden_size=16, num_attention_heads=4, kv_channels=4, group_query_attention=False,
        num_query_groups=4, ffn_hidden_size=32, padded_vocab_size=64,
        untie_embeddings_and_output_weights=True, swiglu=True, num_experts=4, moe_ffn_hidden_size=8,
        moe_shared_expert_intermediate_size=8, moe_layer_freq=[0, 1, 1],
        tensor_model_parallel_size=2, ckpt_format="torch_dist"))
    (tmp / "megatron_fsdp_dtensor" / "latest_checkpointed_iteration.txt").write_text("50")
    write_megatron_legacy(tmp / "megatron_legacy")
    write_megatron_legacy(tmp / "megatron_legacy_pre16", zip_format=False)
    write_torchsave(tmp / "torchsave")
    write_torchsave_legacy(tmp / "torchsave_legacy")
    write_safetensors(tmp / "safetensors", tmp / "safetensors_sharded")
    write_bad(tmp / "bad", scratch / "bad_source", tmp / "torchsave" / "model.pt",
              tmp / "torchsave_legacy" / "model.pt")
    shutil.rmtree(scratch)
    log("single-process fixtures written")


def main() -> int:
    args = parse_args()
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if up_to_date(out, args.force):
        return 0
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another caller may be building the same set
        if up_to_date(out, args.force):
            return 0
        # Leftovers of builds that were killed; nobody else builds while we hold the lock.
        for stale in list(out.parent.glob(f".{out.name}.tmp-*")) + list(out.parent.glob(f".{out.name}.old-*")):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        try:
            build(tmp)
            (tmp / ".complete").write_text(script_hash() + "\n")
            if out.exists():  # stale set: move aside, swap in, then delete
                old = out.parent / f".{out.name}.old-{os.getpid()}"
                out.rename(old)
                tmp.rename(out)
                shutil.rmtree(old)
            else:
                tmp.rename(out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
