#!/usr/bin/env python3
"""Baseline (b) of the verification benchmark: torch's dcp.load of every tensor of a checkpoint
plus a SHA-256 of each, in Python. Prints {"seconds", "bytes"}.

    python bench/bench_torch_load_hash.py CKPT_DIR
"""
import hashlib
import json
import sys
import time

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader


def main() -> None:
    path = sys.argv[1]
    t0 = time.perf_counter()
    md = FileSystemReader(path).read_metadata()
    sd = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype)
          for k, v in md.state_dict_metadata.items() if hasattr(v, "size")}
    dcp.load(sd, storage_reader=FileSystemReader(path),
             planner=DefaultLoadPlanner(flatten_state_dict=False, allow_partial_load=True),
             no_dist=True)
    total = 0
    for v in sd.values():
        b = v.contiguous().view(torch.uint8).numpy().tobytes()
        hashlib.sha256(b).hexdigest()
        total += len(b)
    print(json.dumps({"seconds": time.perf_counter() - t0, "bytes": total}))


if __name__ == "__main__":
    main()
