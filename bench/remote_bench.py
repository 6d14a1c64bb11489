#!/usr/bin/env python3
"""The remote open against the local one, in one run, through a real ssh on loopback.

    bench/remote_bench.py [DIR] [--data CHECKPOINT] [--build build]

Starts a throwaway OpenSSH server on a free port of 127.0.0.1 (tools/check_remote.py's), then
runs build/bench/bench_remote_open: DIR (default build/bench-data/dsv3-gui: the metadata
bench's .metadata, 1.75 M chunks, beside sparse stand-ins for its data files, made by
bench/dsv3_data.sh on first use, so that the integrity checks pass as on a real checkpoint)
opened here (decoded, then from the persistent index) and through `shardscope-cli --ssh`'s
session (the server decodes it, then reads its own index and sends its entry ahead of its
open, then names the entry this side kept; first paint is when the keys are here), with
the bytes on the wire; and the biggest tensor of CHECKPOINT (default the demo, whose data is
real) read with its statistics and hash here and through the session.
Prints the figures and the ratios the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from check_remote import Sshd  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=str(ROOT / "build/bench-data/dsv3-gui"))
    ap.add_argument("--data", default=str(ROOT / "resources/demo/dsv3-mini"))
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    d = Path(a.dir)
    cli = Path(a.build) / "app/cli/shardscope-cli"
    if not (d / ".metadata").exists():
        subprocess.run(["bash", "-c", ". bench/dsv3_data.sh"], cwd=ROOT, check=True,
                       env=dict(os.environ, PY=sys.executable, CLI=str(cli),
                                META=str(Path(a.build) / "bench-data/dsv3"), DIR=str(d),
                                LAYOUT=str(Path(a.build) / "bench-data/dsv3-layout.json")))
    (d / ".metadata").read_bytes()  # page cache warm for both sides
    with tempfile.TemporaryDirectory(prefix="shardscope-remote-bench-") as tmp:
        sshd = Sshd(Path(tmp))
        try:
            env = dict(os.environ, SHARDSCOPE_SSH=str(sshd.ssh),
                       SHARDSCOPE_CACHE_DIR=str(Path(tmp) / "local-cache"))
            p = subprocess.run([Path(a.build) / "bench/bench_remote_open", d.resolve(),
                                "shardscope-test", cli.resolve(), Path(a.data).resolve()],
                               capture_output=True, text=True, env=env)
        finally:
            sshd.stop()
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return 1
    r = json.loads(p.stdout)
    first, cached, reopen = r["remote_first_open"], r["remote_cached_open"], r["remote_reopen"]
    local = r["local_cached_seconds"]
    for o in (first, cached, reopen):  # a bench_remote_open from before the keys came ahead
        o.setdefault("first_paint_seconds", o["seconds"])
    r["ratio"] = {
        "first_open_vs_local_decoded": round(first["seconds"] / r["local_decoded_seconds"], 2),
        "cached_open_vs_local_cached": round(cached["seconds"] / local, 2),
        "cached_open_first_paint_vs_local_cached": round(cached["first_paint_seconds"] / local, 2),
        "reopen_vs_local_cached": round(reopen["seconds"] / local, 2),
        "reopen_first_paint_vs_local_cached": round(reopen["first_paint_seconds"] / local, 2),
        "reopen_best_first_paint_vs_local_cached":
            round(r.get("remote_reopen_best_first_paint_seconds", reopen["seconds"]) / local, 2),
        "wire_bytes_vs_metadata": round(first["bytes_received"] / r["metadata_bytes"], 3),
    }
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
