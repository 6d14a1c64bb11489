#!/usr/bin/env python3
"""The anchor of the fix benchmark: what a user does today to make a checkpoint's keys the ones a
load asks for.

    python bench/bench_torch_rewrite.py SRC OUT [--strip PREFIX] [--fuse-swiglu] [--expect OTHER]

Loads every tensor of the DCP checkpoint SRC with torch (dcp.load into empties of the stored
shapes and dtypes), renames the keys (PREFIX stripped) or fuses SwiGLU's `<key>_w` and `<key>_v`
into `<key>` (torch.cat, as Megatron's handler does), and saves the result with dcp.save into
OUT, timed. With --expect, the tensors OUT holds must be OTHER's keys (what `shardscope-cli fix`
wrote): the two did the same thing. Prints JSON: seconds, bytes, peak RSS.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

warnings.filterwarnings("ignore")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--strip", default="")
    ap.add_argument("--fuse-swiglu", action="store_true")
    ap.add_argument("--expect")
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    t0 = time.perf_counter()
    md = dcp.FileSystemReader(a.src).read_metadata().state_dict_metadata
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in md.items() if isinstance(m, TensorStorageMetadata)}
    dcp.load(sd, checkpoint_id=a.src)
    renamed = {k.removeprefix(a.strip): v for k, v in sd.items()}
    if a.fuse_swiglu:
        for k in [k for k in renamed if k.endswith("_w") and k[:-2] + "_v" in renamed]:
            renamed[k[:-2]] = torch.cat([renamed.pop(k), renamed.pop(k[:-2] + "_v")])
    dcp.save(renamed, checkpoint_id=a.out)
    seconds = time.perf_counter() - t0
    nbytes = sum(v.numel() * v.element_size() for v in sd.values())
    if a.expect:
        theirs = dcp.FileSystemReader(a.expect).read_metadata().state_dict_metadata
        tensors = {k for k, m in theirs.items() if isinstance(m, TensorStorageMetadata)}
        assert set(renamed) == tensors, "the torch rewrite and the fix hold different keys"
    print(json.dumps({"seconds": seconds, "bytes": nbytes,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
