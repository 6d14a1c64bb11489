#!/usr/bin/env python3
"""Write the demo model as Megatron-FSDP saves it under tensor and expert parallelism: a real
torch DCP checkpoint from TP × DP gloo ranks, every rank writing the chunks that
``uneven_dtensor.gather_and_compute_chunk_metadata`` gives its flat, row-aligned shard of each
TP-local parameter (docs/formats.md §6.2, §6.3).

    make_tp_checkpoint.py --out DIR [--tp 2] [--dp 2] [--ep 2]

What differs from the TP = 1 demo (tools/make_demo.py, whose model and buffer layout it reuses):
* Megatron-FSDP builds its buffers from TP-local parameters: column-parallel weights hold rows
  [t·n/TP, (t+1)·n/TP) (a fused one the rank's rows of each section, [s1_t; s2_t]), row-parallel
  ones columns; norms and the router are whole on every TP rank.
* Experts live on EP rank e // (E / EP), with ETP = 1, and shard over the expert-data-parallel
  ranks (TP · DP / EP of them), in buffers of their own.
* A chunk's offsets: along the TP dim, t times the TP-local extent; along dim 0, the rows of that
  tensor on lower DP ranks (a fused parameter's section: the rows of that section). Chunks of a
  TP-replicated tensor are the same on every TP rank, and DCP writes them once.

Only the model section is written (with args, iteration and checkpoint_version): the optimizer
shards the same way and adds nothing to what this checks. After saving, rank 0 reads every tensor
back with torch and compares it with the full tensors the ranks were cut from.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_demo as demo  # noqa: E402
import torch  # noqa: E402

# Megatron's TP partition dims for the demo's parameters (docs/formats.md §7.4): column-parallel = 0,
# row-parallel = 1, anything else whole on every TP rank.
COLUMN = [r"word_embeddings\.weight$", r"output_layer\.weight$", r"linear_qkv_down_proj\.weight$",
          r"linear_q_up_proj\.weight$", r"linear_kv_up_proj\.weight$", r"linear_fc1\.weight\d*$",
          r"eh_proj\.weight$"]
ROW = [r"linear_proj\.weight$", r"linear_fc2\.weight\d*$"]


def tp_dim(name: str) -> int:
    if any(re.search(p, name) for p in COLUMN):
        return 0
    if any(re.search(p, name) for p in ROW):
        return 1
    return -1


def sections(cfg, p) -> list[int]:
    """Rows of each fused section (full units), in order; one section when not fused."""
    if re.search(r"linear_fc1\.weight\d*$", p.name):
        return [p.shape[0] // 2, p.shape[0] // 2]
    if p.name.endswith("linear_qkv_down_proj.weight"):
        return [cfg.q_lora, p.shape[0] - cfg.q_lora]
    return [p.shape[0]]


def worker(rank: int, rendezvous: str, ckpt_dir: str, tp: int, dp: int, ep: int) -> None:
    torch.set_num_threads(1)
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex
    from torch.distributed.checkpoint.metadata import TensorProperties
    from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    world = tp * dp
    # A file rendezvous: no port to race for with tests running beside this one.
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank,
                            world_size=world)
    try:
        cfg = demo.Cfg()
        t, d = rank % tp, rank // tp  # Megatron's order: tp fastest, then (ep within) dp
        e_rank, edp = rank % ep, rank // ep  # ETP = 1: ep fastest, then expert-dp
        per_ep = cfg.experts // ep
        mesh = init_device_mesh("cpu", (world,))

        full = {p.name: demo.init_param(p) for p in demo.live_params(cfg)}
        mine = []  # this rank's model: dense parameters and its EP rank's experts
        for p in demo.live_params(cfg):
            m = re.search(r"\.weight(\d+)$", p.name)
            if p.is_expert and m and int(m.group(1)) // per_ep != e_rank:
                continue
            mine.append(p)

        # TP-local tensors (experts: ETP = 1, whole) and their shapes.
        local, secs = {}, {}
        for p in mine:
            dim = -1 if p.is_expert else tp_dim(p.name)
            w = full[p.name]
            secs[p.name] = sections(cfg, p)
            if dim == 0 and tp > 1:
                parts, at = [], 0
                for s in secs[p.name]:
                    parts.append(w[at + t * (s // tp): at + (t + 1) * (s // tp)])
                    at += s
                w = torch.cat(parts)
            elif dim == 1 and tp > 1:
                w = w.chunk(tp, dim=1)[t]
            local[p.name] = (w.contiguous(), dim)
        lparams = [demo.Param(p.name, tuple(local[p.name][0].shape), p.is_expert, p.unit)
                   for p in mine]
        assert dp == world // ep, "this writer plans DP == expert-DP"
        demo.DP = dp
        demo.build_groups(lparams)

        def hooks(tensor, meta: ChunkStorageMetadata, size: torch.Size) -> None:
            def items(fqn, dt):
                return [WriteItem(type=WriteItemType.SHARD,
                                  index=MetadataIndex(fqn, meta.offsets),
                                  tensor_data=TensorWriteData(
                                      chunk=meta,
                                      properties=TensorProperties.create_from_tensor(
                                          dt.to_local()),
                                      size=size))] if dt.to_local().numel() else []
            tensor._local_tensor.__create_chunk_list__ = lambda: [meta]
            tensor._local_tensor.__create_write_items__ = items

        model = {}
        for lp in lparams:
            w, dim = local[lp.name]
            a, b = lp.slices[edp if lp.is_expert else d]
            flat = w.reshape(-1)
            row = lp.row
            names = demo.disk_tensors(cfg, [demo.Param(lp.name, full[lp.name].shape)])
            at_full, at_local = 0, 0
            for disk, s in zip(names, secs[lp.name] if len(names) > 1 else [full[lp.name].shape[0]]):
                rj = s // tp if dim == 0 else s  # the section's TP-local rows
                lo, hi = max(a, at_local * row), min(b, (at_local + rj) * row)
                piece = flat[lo:hi].view(-1, *w.shape[1:]) if lo < hi else \
                    torch.empty((0, *w.shape[1:]))
                first = (lo - at_local * row) // row if lo < hi else 0  # rows on lower DP ranks
                shape = list(w.shape)
                shape[0] = s if dim == 0 else rj
                offsets = [first] + [0] * (w.dim() - 1)
                if dim == 0:
                    offsets[0] += t * rj
                    shape = [s] + list(full[lp.name].shape[1:])
                elif dim == 1:
                    offsets[1] = t * w.shape[1]
                    shape = [rj] + list(full[lp.name].shape[1:])
                size = torch.Size(shape)
                dt = DTensor.from_local(piece.clone(), mesh, [Shard(0)], run_check=False,
                                        shape=size,
                                        stride=torch.empty(size, device="meta").stride())
                hooks(dt, ChunkStorageMetadata(offsets=torch.Size(offsets),
                                               sizes=piece.shape), size)
                model["module." + disk.fqn] = dt
                at_full += s
                at_local += rj
        for name, shape in demo.router_buffers(cfg):
            g = demo._gen("buffer:" + name)
            model["module." + name.replace(".mtp_model_layer.", ".transformer_layer.")] = \
                1e-3 * torch.randn(shape, generator=g)
        sd = {"args": demo.make_args(cfg), "checkpoint_version": 3.0,
              "iteration": demo.ITERATION, "model": model}
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(ckpt_dir))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def check(ckpt_dir: str) -> int:
    """Every stored tensor, read back by torch, must be the full tensor's rows it names."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    cfg = demo.Cfg()
    sd: dict = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(ckpt_dir),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    params = demo.live_params(cfg)
    n = 0
    for disk in demo.disk_tensors(cfg, params):
        got = sd["model"]["module." + disk.fqn]
        want = demo.init_param(disk.param)[disk.rows[0]:disk.rows[1]]
        assert torch.equal(got, want), disk.fqn
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--ep", type=int, default=2)
    ns = ap.parse_args()
    out = os.path.abspath(ns.out)
    if os.path.exists(out):
        if not os.path.exists(os.path.join(out, "latest_checkpointed_iteration.txt")):
            print(f"refusing to overwrite non-checkpoint directory {out}", file=sys.stderr)
            return 2
        shutil.rmtree(out)
    ckpt_dir = os.path.join(out, f"iter_{demo.ITERATION:07d}")
    os.makedirs(ckpt_dir)
    import json
    import torch.multiprocessing as mp

    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # no reliance on hostname resolution
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "rendezvous"), ckpt_dir, ns.tp, ns.dp, ns.ep),
                 nprocs=ns.tp * ns.dp, join=True)
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(demo.ITERATION))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(demo.hf_config(demo.Cfg()), f, indent=2)
        f.write("\n")
    n = check(ckpt_dir)
    print(f"wrote {out}: tp {ns.tp} × dp {ns.dp}, ep {ns.ep}; {n} model tensors read back by "
          "torch equal to the full tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
