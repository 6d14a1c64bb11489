#!/usr/bin/env python3
"""Two DCP checkpoints of the same model for bench/values_bench.sh: N float32 (or bfloat16)
matrices in the first, the same plus a small perturbation in the second (a run after a few
steps), written by torch's own dcp.save.

    make_value_pair.py OUT_DIR [--gib 2] [--dtype float32]
"""
import argparse
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gib", type=float, default=2.0, help="size of each checkpoint")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    rows, cols = 4096, 4096
    per = rows * cols * torch.finfo(dtype).bits // 8
    count = max(1, int(a.gib * (1 << 30) // per))
    g = torch.Generator().manual_seed(0)
    first, second = {}, {}
    for i in range(count):
        w = torch.randn(rows, cols, generator=g)
        first[f"decoder.layers.{i}.mlp.linear_fc1.weight"] = w.to(dtype)
        second[f"decoder.layers.{i}.mlp.linear_fc1.weight"] = (
            w + 1e-3 * torch.randn(rows, cols, generator=g)).to(dtype)
    out = Path(a.out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(first, checkpoint_id=str(out / "a"))
        dcp.save(second, checkpoint_id=str(out / "b"))
    print(f"{count} tensors of {rows}x{cols} {a.dtype} in each of {out}/a and {out}/b")


if __name__ == "__main__":
    main()
