#!/usr/bin/env python3
"""Baseline for ShardScope's metadata reader: how long torch itself takes to read a DCP
``.metadata`` and how much memory that costs.

    python bench/bench_torch_read_metadata.py DIR [REPEATS]

* seconds: best of REPEATS (default 3) ``FileSystemReader(DIR).read_metadata()`` calls, after one warm-up read of
  the file's bytes (page cache), with the previous result freed between runs;
* peak_rss_mb: ``ru_maxrss`` of a fresh Python process that imports torch and does one read
  (import_rss_mb is the same process's peak before the read, i.e. torch's own footprint);
* keys / chunks: entries in ``state_dict_metadata`` and chunks over all tensor entries.

Prints one JSON object.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys
from torch.distributed.checkpoint import FileSystemReader
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
md = FileSystemReader(sys.argv[1]).read_metadata()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kb": before, "after_kb": after}))
sys.stdout.flush()
import os
os._exit(0)
"""


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    ckpt = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) == 3 else 3
    path = os.path.join(ckpt, ".metadata")

    with open(path, "rb") as f:  # warm the page cache (without growing this process much)
        while f.read(1 << 24):
            pass

    # Peak RSS first, while this process is still small: Linux carries the parent's RSS high-water
    # mark over fork/exec into the child's ru_maxrss.
    out = subprocess.run(
        [sys.executable, "-c", CHILD, ckpt], check=True, capture_output=True, text=True
    )
    child = json.loads(out.stdout.strip().splitlines()[-1])

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    best = float("inf")
    keys = chunks = 0
    for i in range(repeats):
        t0 = time.perf_counter()
        md = FileSystemReader(ckpt).read_metadata()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        if i == 0:
            sdm = md.state_dict_metadata
            keys = len(sdm)
            chunks = sum(
                len(v.chunks) for v in sdm.values() if isinstance(v, TensorStorageMetadata)
            )
        del md
        gc.collect()

    scale = 1024 if sys.platform != "darwin" else 1  # ru_maxrss: KiB on Linux, bytes on macOS
    print(
        json.dumps(
            {
                "seconds": round(best, 3),
                "peak_rss_mb": round(child["after_kb"] * scale / 2**20, 1),
                "keys": keys,
                "chunks": chunks,
                "import_rss_mb": round(child["before_kb"] * scale / 2**20, 1),
                "file_mb": round(os.path.getsize(path) / 2**20, 1),
            }
        )
    )
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
