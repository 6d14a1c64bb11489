#!/usr/bin/env python3
"""Write a DeepSeek-V3-671B-scale DCP ``.metadata`` (no ``.distcp`` data) for reader benchmarks.

    python bench/make_dsv3_metadata.py --out DIR [--ranks 256] [--ep 32]

The file is built from torch's own classes (``Metadata``, ``TensorStorageMetadata``,
``TensorProperties``, ``ChunkStorageMetadata``, ``MetadataIndex``, ``BytesStorageMetadata``,
``StorageMeta``, ``filesystem._StorageInfo``) and written exactly as ``FileSystemWriter.finish``
does: ``pickle.dump(metadata, f)`` with the default protocol into ``.metadata.tmp``, then renamed.

Content (docs/formats.md §5.4, §6, §7.2), named as Megatron-FSDP ``fsdp_dtensor`` writes it after
M-6271: 61 layers (0-2 dense, 3-60 MoE with 256 routed experts as per-expert keys
``linear_fc1.weight<e>_w/_v`` and ``linear_fc2.weight<e>``, shared experts, router weight + fp32
``expert_bias`` buffer), unfused MLA keys, one MTP layer (``mtp.layers.0.transformer_layer``),
``model.module.*`` FP32 main weights, ``optimizer.state.module.module.module.<FQN>.{step,exp_avg,
exp_avg_sq}``, ``optimizer.param_to_group_meta.module.module.module.<name>.<hyperparameter>``
BYTE_IO leaves (live, i.e. fused-SwiGLU, parameter names), ``args`` / ``checkpoint_version`` /
``iteration`` / ``opt_param_scheduler`` / ``num_floating_point_operations_so_far`` BYTE_IO, and a
DP-gathered ``rng_state.(0, 0).<dp>.*``.

Sharding (deliberately a stress layout): every DTensor is flat-sharded *on its own* over its data
parallel group, row-aligned: the tensor's flat buffer is padded to a multiple of ``D * row`` so
rank ``j`` of the group holds rows ``[j*S, (j+1)*S)`` with ``S = ceil(rows / D)``; ranks past the
end hold nothing and write no chunk.  Non-expert tensors use all ``--ranks`` ranks; expert
tensors use their expert-data-parallel group (``ranks / ep`` ranks: ``ep_rank + ep * j``), as
experts are not sharded over EP.  With the defaults (256 ranks, EP 32) that is ~1.74 M chunks.
(Megatron-FSDP's real per-layer bucket layout would give far fewer chunks per tensor: a tensor
only spans the ranks its slice of the layer's flat bucket falls on.)  As Megatron's
``uneven_dtensor`` does, DTensor chunk offsets/sizes are plain tuples; plain tensors (``step``,
``expert_bias``, RNG states) get ``torch.Size`` chunks via the default planner.

Object identity follows what the coordinator ends up with after gathering the ranks' plans and
write results: distinct ``torch.Size`` / tuple objects per field (torch never shares them), a
separate ``MetadataIndex.fqn`` string per stored item, one ``relative_path`` string per data file,
``planner_data`` keys shared with ``state_dict_metadata`` keys, path components shared within a
rank's state dict.  Keys appear in first-seen order of the rank-ordered global plan; replicated
items (BYTE_IO, ``step``, buffers) are spread over ranks the way ``dedup_save_plans`` balances
them (round robin here); within a data file BYTE_IO items come first, then tensors, at growing
offsets with lengths of the corresponding ``torch.save`` archives.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import pickle
import random
import sys
import time
import uuid
from array import array
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

try:
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION
except ImportError:  # older torch: no Metadata.version
    CURRENT_DCP_VERSION = None

# DeepSeek-V3 (docs/formats.md §7.2)
H, V, F = 7168, 129280, 18432
LAYERS, DENSE = 61, 3
E, FM, FS = 256, 2048, 2048
HEADS, QK, ROPE, VH = 128, 128, 64, 128
QR, KVR = 1536, 512
MTP = 1

TORCH_SAVE_OVERHEAD = 1577  # bytes a torch.save zip adds around one small storage
BYTES_LEN = {  # typical torch.save() sizes of the BYTE_IO leaves
    "args": 17_853,
    "random_rng_state": 7_052,
    "np_rng_state": 3_870,
}

_ints: dict = {}


def I(x: int) -> int:  # share int objects (ints are never memoized by pickle: invisible)
    return _ints.setdefault(x, x)


# --------------------------------------------------------------------------------------------
# The flattened state dict, in traversal order
# --------------------------------------------------------------------------------------------

# Leaf kinds
BYTES, DTENSOR, PLAIN = 0, 1, 2


class Leaf:
    __slots__ = (
        "key", "path", "kind", "shape", "dtype", "base", "stride", "group", "length", "rank",
    )

    def __init__(self, path, kind, shape=None, dtype=torch.float32, base=0, stride=1, group=1,
                 length=1261):
        self.path = path
        self.key = ".".join(map(str, path))
        self.kind = kind
        self.shape = shape
        self.dtype = dtype
        self.base = base  # first global rank of the sharding group
        self.stride = stride  # global-rank step between consecutive members
        self.group = group  # group size
        self.length = length  # BYTE_IO length
        self.rank = -1  # assigned rank for BYTE_IO / replicated plain tensors


def layer_params(prefix: str, moe: bool) -> list:
    """(on-disk FQN, shape, expert index or None, live name) for one transformer layer."""
    att = f"{prefix}.self_attention"
    out = [
        (f"{prefix}.input_layernorm.weight", (H,), None, None),
        (f"{att}.linear_q_down_proj.weight", (QR, H), None, None),
        (f"{att}.linear_q_up_proj.layer_norm_weight", (QR,), None, None),
        (f"{att}.linear_q_up_proj.weight", (HEADS * (QK + ROPE), QR), None, None),
        (f"{att}.linear_kv_down_proj.weight", (KVR + ROPE, H), None, None),
        (f"{att}.linear_kv_up_proj.layer_norm_weight", (KVR,), None, None),
        (f"{att}.linear_kv_up_proj.weight", (HEADS * (QK + VH), KVR), None, None),
        (f"{att}.linear_proj.weight", (H, HEADS * VH), None, None),
    ]
    if not moe:
        fc1 = f"{prefix}.mlp.linear_fc1.weight"
        out += [
            (f"{prefix}.mlp.linear_fc1.layer_norm_weight", (H,), None, None),
            (fc1 + "_w", (F, H), None, fc1),
            (fc1 + "_v", (F, H), None, fc1),
            (f"{prefix}.mlp.linear_fc2.weight", (H, F), None, None),
        ]
        return out
    out += [
        (f"{prefix}.pre_mlp_layernorm.weight", (H,), None, None),
        (f"{prefix}.mlp.router.weight", (E, H), None, None),
    ]
    for e in range(E):
        fc1 = f"{prefix}.mlp.experts.linear_fc1.weight{e}"
        out += [(fc1 + "_w", (FM, H), e, fc1), (fc1 + "_v", (FM, H), e, fc1)]
    for e in range(E):
        out.append((f"{prefix}.mlp.experts.linear_fc2.weight{e}", (H, FM), e, None))
    sfc1 = f"{prefix}.mlp.shared_experts.linear_fc1.weight"
    out += [
        (sfc1 + "_w", (FS, H), None, sfc1),
        (sfc1 + "_v", (FS, H), None, sfc1),
        (f"{prefix}.mlp.shared_experts.linear_fc2.weight", (H, FS), None, None),
    ]
    return out


def model_params() -> tuple[list, list]:
    """On-disk parameters (FQN, shape, expert, live name) and buffers (FQN, shape)."""
    params = [("embedding.word_embeddings.weight", (V, H), None, None)]
    buffers = []
    for i in range(LAYERS):
        moe = i >= DENSE
        params += layer_params(f"decoder.layers.{i}", moe)
        if moe:
            buffers.append((f"decoder.layers.{i}.mlp.router.expert_bias", (E,)))
    params.append(("decoder.final_layernorm.weight", (H,), None, None))
    for m in range(MTP):
        mp = f"mtp.layers.{m}"
        params += [
            (f"{mp}.enorm.weight", (H,), None, None),
            (f"{mp}.hnorm.weight", (H,), None, None),
            (f"{mp}.eh_proj.weight", (H, 2 * H), None, None),
        ]
        inner = layer_params(f"{mp}.transformer_layer", True)
        # live names of the MTP inner layer use mtp_model_layer (renamed on disk, §6.7)
        params += [
            (fqn, shape, e, (live or fqn).replace(".transformer_layer.", ".mtp_model_layer."))
            for fqn, shape, e, live in inner
        ]
        buffers.append((f"{mp}.transformer_layer.mlp.router.expert_bias", (E,)))
        params.append((f"{mp}.final_layernorm.weight", (H,), None, None))
    params.append(("output_layer.weight", (V, H), None, None))
    return params, buffers


def group_meta_keys() -> list:
    """Keys of a Megatron param group held by torch.optim.AdamW (the real default list)."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW(
        [{"params": [p], "wd_mult": 1.0, "lr_mult": 1.0, "is_expert_parallel": False,
          "is_decoupled_lr": False}],
        lr=3.9e-6, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
    )
    return [k for k in opt.param_groups[0] if k != "params"]


def build_leaves(ranks: int, ep: int) -> list:
    expert_dp = ranks // ep
    local_experts = E // ep
    params, buffers = model_params()
    S = {}  # shared path-component strings (dict keys / literals within a rank's state dict)

    def s(x):
        return S.setdefault(x, x)

    def sharding(expert):
        if expert is None:
            return dict(base=0, stride=1, group=ranks)
        return dict(base=expert // local_experts, stride=ep, group=expert_dp)

    leaves = [
        Leaf((s("args"),), BYTES, length=BYTES_LEN["args"]),
        Leaf((s("checkpoint_version"),), BYTES),
        Leaf((s("iteration"),), BYTES),
    ]
    model = s("model")
    buf_after = {b[0].rsplit(".expert_bias", 1)[0] + ".weight": b for b in buffers}
    for fqn, shape, expert, _ in params:
        leaves.append(Leaf((model, "module." + fqn), DTENSOR, shape, **sharding(expert)))
        b = buf_after.get(fqn)
        if b is not None and fqn.endswith(".mlp.router.weight"):
            leaves.append(Leaf((model, "module." + b[0]), PLAIN, b[1]))
    opt, state, ptgm = s("optimizer"), s("state"), s("param_to_group_meta")
    k_step, k_avg, k_sq = s("step"), s("exp_avg"), s("exp_avg_sq")
    for fqn, shape, expert, _ in params:
        name = "module.module.module." + fqn
        leaves.append(Leaf((opt, state, name, k_step), PLAIN, ()))
        leaves.append(Leaf((opt, state, name, k_avg), DTENSOR, shape, **sharding(expert)))
        leaves.append(Leaf((opt, state, name, k_sq), DTENSOR, shape, **sharding(expert)))
    gm_keys = [s(k) for k in group_meta_keys()]
    seen = set()
    for fqn, shape, expert, live in params:
        live = live or fqn
        if live in seen:
            continue
        seen.add(live)
        name = "module.module.module." + live
        for k in gm_keys:
            leaves.append(Leaf((opt, ptgm, name, k), BYTES, length=1290 if k == "betas" else 1261))
    sched = s("opt_param_scheduler")
    for k in ("max_lr", "lr_warmup_steps", "num_steps", "lr_decay_style", "lr_decay_steps",
              "min_lr", "start_wd", "end_wd", "wd_incr_style", "wd_incr_steps"):
        leaves.append(Leaf((sched, s(k)), BYTES))
    rng, ppt = s("rng_state"), s("(0, 0)")
    for dp in range(ranks):
        leaves.append(Leaf((rng, ppt, dp, s("random_rng_state")), BYTES,
                           length=BYTES_LEN["random_rng_state"]))
        leaves.append(Leaf((rng, ppt, dp, s("np_rng_state")), BYTES,
                           length=BYTES_LEN["np_rng_state"]))
        leaves.append(Leaf((rng, ppt, dp, s("torch_rng_state")), PLAIN, (5056,), torch.uint8))
        leaves.append(Leaf((rng, ppt, dp, s("cuda_rng_state")), PLAIN, (16,), torch.uint8))
        for t in ("model-parallel-rng", "expert-parallel-rng", "data-parallel-rng"):
            leaves.append(Leaf((rng, ppt, dp, s("rng_tracker_states"), s(t)), PLAIN, (16,),
                               torch.uint8))
    leaves.append(Leaf((s("num_floating_point_operations_so_far"),), BYTES))
    return leaves


def rows_per_rank(shape, group):
    rows = shape[0]
    return max(1, math.ceil(rows / group))


def dtensor_chunks(leaf: Leaf):
    """(global rank, first row, rows) for each non-empty piece."""
    rows = leaf.shape[0]
    per = rows_per_rank(leaf.shape, leaf.group)
    out = []
    j = 0
    while j * per < rows and j < leaf.group:
        r0 = j * per
        out.append((leaf.base + leaf.stride * j, r0, min(per, rows - r0)))
        j += 1
    return out


# --------------------------------------------------------------------------------------------
# Metadata assembly
# --------------------------------------------------------------------------------------------


def build_metadata(out_dir: str, ranks: int, ep: int, seed: int) -> Metadata:
    t0 = time.time()
    leaves = build_leaves(ranks, ep)
    print(f"  {len(leaves):,} leaves ({time.time() - t0:.1f}s)", flush=True)

    # dedup_save_plans spreads replicated items over the lightest plans: round robin here.
    rr = 0
    for leaf in leaves:
        if leaf.kind != DTENSOR:
            leaf.rank = rr
            rr = (rr + 1) % ranks
    # First-seen order in the rank-ordered global plan.
    first_rank = [leaf.base if leaf.kind == DTENSOR else leaf.rank for leaf in leaves]
    order = sorted(range(len(leaves)), key=first_rank.__getitem__)

    # Per-rank write lists (plan order): BYTE_IO first, then tensors. Encoded leaf*512+chunk.
    bytes_items = [array("q") for _ in range(ranks)]
    tensor_items = [array("q") for _ in range(ranks)]

    sdm: dict = {}
    planner: dict = {}
    chunks_of: list = [None] * len(leaves)
    n_chunks = 0
    for li in order:
        leaf = leaves[li]
        key = leaf.key
        if leaf.kind == BYTES:
            sdm[key] = BytesStorageMetadata()
            continue
        shape = leaf.shape
        if leaf.kind == PLAIN:
            nd = len(shape)
            chunks = [ChunkStorageMetadata(offsets=torch.Size([0] * nd), sizes=torch.Size(shape))]
        else:
            tail = tuple(I(x) for x in shape[1:])
            zeros = (0,) * (len(shape) - 1)
            chunks = [
                ChunkStorageMetadata(offsets=(I(r0),) + zeros, sizes=(I(n),) + tail)
                for _, r0, n in dtensor_chunks(leaf)
            ]
        sdm[key] = TensorStorageMetadata(
            properties=TensorProperties(dtype=leaf.dtype),
            size=torch.Size(shape),
            chunks=chunks,
        )
        chunks_of[li] = chunks
        n_chunks += len(chunks)
    print(f"  state_dict_metadata: {len(sdm):,} keys, {n_chunks:,} chunks "
          f"({time.time() - t0:.1f}s)", flush=True)

    for li, leaf in enumerate(leaves):  # traversal (plan) order
        planner[leaf.key] = leaf.path
        if leaf.kind == BYTES:
            bytes_items[leaf.rank].append(li * 512)
        elif leaf.kind == PLAIN:
            tensor_items[leaf.rank].append(li * 512)
        else:
            for ci, (rank, _, _) in enumerate(dtensor_chunks(leaf)):
                tensor_items[rank].append(li * 512 + ci)

    storage: dict = {}
    for rank in range(ranks):
        rel = f"__{rank}_0.distcp"
        pos = 0
        for code in bytes_items[rank]:
            leaf = leaves[code >> 9]
            mi = MetadataIndex(leaf.key.encode().decode())
            storage[mi] = _StorageInfo(relative_path=rel, offset=pos, length=I(leaf.length))
            pos += leaf.length
        for code in tensor_items[rank]:
            li, ci = code >> 9, code & 511
            leaf = leaves[li]
            chunk = chunks_of[li][ci]
            mi = MetadataIndex(leaf.key.encode().decode(), chunk.offsets, ci)
            length = math.prod(chunk.sizes) * leaf.dtype.itemsize + TORCH_SAVE_OVERHEAD
            storage[mi] = _StorageInfo(relative_path=rel, offset=pos, length=I(length))
            pos += length
        bytes_items[rank] = tensor_items[rank] = None
    print(f"  storage_data: {len(storage):,} items ({time.time() - t0:.1f}s)", flush=True)

    rnd = random.Random(seed)
    md = Metadata(
        state_dict_metadata=sdm,
        planner_data=planner,
        storage_data=storage,
        storage_meta=StorageMeta(
            checkpoint_id=Path(os.path.abspath(out_dir)),
            save_id=str(uuid.UUID(int=rnd.getrandbits(128), version=4)),
        ),
    )
    if CURRENT_DCP_VERSION is not None:
        md.version = CURRENT_DCP_VERSION
    return md


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (gets a .metadata file)")
    ap.add_argument("--ranks", type=int, default=256, help="data-parallel world size")
    ap.add_argument("--ep", type=int, default=32, help="expert-parallel size (divides ranks, 256)")
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args()
    if ns.ranks % ns.ep or E % ns.ep or ns.ranks > 512:
        ap.error("--ep must divide --ranks and 256; --ranks at most 512")

    t0 = time.time()
    gc.disable()  # millions of acyclic objects: skip pointless collections
    print(f"building DeepSeek-V3 metadata: {ns.ranks} ranks, EP {ns.ep} "
          f"(expert DP {ns.ranks // ns.ep})", flush=True)
    md = build_metadata(ns.out, ns.ranks, ns.ep, ns.seed)
    os.makedirs(ns.out, exist_ok=True)
    final = os.path.join(ns.out, ".metadata")
    tmp = final + ".tmp"
    t1 = time.time()
    with open(tmp, "wb") as f:
        pickle.dump(md, f)
    if os.path.exists(final):
        os.remove(final)
    os.rename(tmp, final)
    size = os.path.getsize(final)
    t2 = time.time()

    sdm = md.state_dict_metadata
    n_bytes = sum(1 for v in sdm.values() if isinstance(v, BytesStorageMetadata))
    n_chunks = sum(len(v.chunks) for v in sdm.values() if isinstance(v, TensorStorageMetadata))
    print(f"keys: {len(sdm):,} (tensor {len(sdm) - n_bytes:,}, BYTE_IO {n_bytes:,}); "
          f"chunks: {n_chunks:,}; storage items: {len(md.storage_data):,}")
    print(f"wrote {final}: {size:,} bytes ({size / 2**20:.1f} MiB); "
          f"build {t1 - t0:.1f}s, pickle {t2 - t1:.1f}s")
    sys.stdout.flush()
    os._exit(0)  # skip tearing down tens of millions of objects


if __name__ == "__main__":
    main()
