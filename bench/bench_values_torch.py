#!/usr/bin/env python3
"""The baseline of bench/values_bench.sh: what an engineer writes today to compare two DCP
checkpoints value by value: dcp.load both into memory, then per tensor in float64 the figures
`diff --values` prints (bit-identical, differing count and first index, max abs and rel, mean
abs, RMS, relative L2, cosine). Prints one JSON line with its wall time.

    bench_values_torch.py A B
"""
import json
import sys
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp


def load(path: str) -> dict:
    md = dcp.FileSystemReader(path).read_metadata()
    sd = {k: torch.empty(m.size, dtype=m.properties.dtype)
          for k, m in md.state_dict_metadata.items() if hasattr(m, "size")}
    dcp.load(sd, checkpoint_id=path)
    return sd


def figures(a: torch.Tensor, b: torch.Tensor) -> dict:
    a64, b64 = a.double().flatten(), b.double().flatten()
    differ = a.view(torch.int32 if a.element_size() == 4 else torch.int16) != \
        b.view(torch.int32 if b.element_size() == 4 else torch.int16)
    count = int(differ.sum())
    first = int(differ.flatten().nonzero()[0]) if count else None
    d = (a64 - b64).abs()
    nz = b64 != 0
    nb = b64.norm().item()
    return {"identical": count == 0, "differing": count, "first": first,
            "max_abs": d.max().item(), "max_rel": (d[nz] / b64[nz].abs()).max().item(),
            "mean_abs": d.mean().item(), "rms": d.square().mean().sqrt().item(),
            "rel_l2": d.norm().item() / nb, "cosine": (a64 @ b64).item() / (a64.norm().item() * nb)}


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t0 = time.perf_counter()
    a, b = load(sys.argv[1]), load(sys.argv[2])
    t1 = time.perf_counter()
    out = {k: figures(a[k], b[k]) for k in a if k in b}
    t2 = time.perf_counter()
    print(json.dumps({"tensors": len(out), "load_s": round(t1 - t0, 2),
                      "figures_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2),
                      "different": sum(not f["identical"] for f in out.values())}))


if __name__ == "__main__":
    main()
