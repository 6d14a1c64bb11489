#!/usr/bin/env python3
"""A rank lost midway: every other rank ends soon, with an error naming the lost rank.

    python tools/check_rank_loss.py --cli shardscope-cli --shim libreadfault.so --demo DIR

Runs `verify` and the value comparison (`diff --against --values`) of the bundled demo as N
processes over c10d Gloo, started the way srun starts them (each its own process with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT; nothing kills the others when one dies), and has the
read fault shim (tests/faults/readfault.cpp) SIGKILL one rank at its first data read: rank 1
of 2, then rank 0 of 3 (the rank that serves the job's store). Each survivor must exit with 2
within a bounded time (no hang) and say which rank is lost. Then the same under torchrun: its
agent stops the survivors, and they say so in one line.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

BOUND = 60  # seconds: the roll call waits 5, Gloo notices a closed peer at once


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cmd: list[str], world: int, victim: int, shim: str) -> list[str]:
    port = free_port()
    procs = []
    start = time.monotonic()
    for r in range(world):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r),
               "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "LD_PRELOAD": shim, "SHARDSCOPE_FAULT": "kill",
               "SHARDSCOPE_FAULT_RANK": str(victim), "SHARDSCOPE_FAULT_FILE": ".distcp",
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE))
    problems = []
    for r, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=BOUND + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            problems.append(f"rank {r} still running after {BOUND + 30} s: a hang")
            continue
        took = time.monotonic() - start
        text = err.decode("utf-8", "replace")
        if r == victim:
            if p.returncode != -9:
                problems.append(f"rank {r} was not killed (exit {p.returncode}): the shim missed")
            continue
        lines = [l for l in text.splitlines() if l.startswith("shardscope-cli:")]
        if p.returncode != 2:
            problems.append(f"rank {r}: exit {p.returncode}, not 2; {text[-300:]!r}")
        if took > BOUND:
            problems.append(f"rank {r} took {took:.0f} s to end")
        if not any(f"rank {victim}" in l and "lost" in l for l in lines):
            problems.append(f"rank {r} does not name rank {victim} as lost: {lines!r}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--demo", type=Path, required=True)
    a = ap.parse_args()
    t = Tally()

    with tempfile.TemporaryDirectory() as tmp:
        layout = Path(tmp) / "layout.json"
        subprocess.run([a.cli, "layout", "--from-config", str(a.demo / "config.json"), "-o",
                        str(layout)], check=True, capture_output=True)
        for world, victim in ((2, 1), (3, 0)):
            verify = [a.cli, "verify", str(a.demo), "--layout", str(layout), "--dp", str(world)]
            t.unit(f"verify, rank {victim} of {world} killed",
                  run_ranks(verify, world, victim, a.shim))
        values = [a.cli, "diff", str(a.demo), "--against", str(a.demo), "--values", "--layout",
                  str(layout), "--backend", "gloo"]
        t.unit("values, rank 1 of 2 killed", run_ranks(values, 2, 1, a.shim))

        # torchrun stops the others itself (SIGTERM): they end at once and say why. The shim is
        # preloaded into the ranks only (`env` execs the CLI): in torchrun's own Python, an
        # ASan build's shim would bring the sanitizer into torch's import (80 s more).
        fault = ["env", f"LD_PRELOAD={a.shim}", "SHARDSCOPE_FAULT=kill", "SHARDSCOPE_FAULT_RANK=1",
                 "SHARDSCOPE_FAULT_FILE=.distcp",
                 "ASAN_OPTIONS=" + os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"]
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--no-python",
                            "--standalone", "--nproc-per-node", "2", *fault, a.cli, "verify",
                            str(a.demo), "--layout", str(layout), "--dp", "2"],
                           capture_output=True, timeout=BOUND + 60)
        err = p.stderr.decode("utf-8", "replace")
        problems = []
        if p.returncode == 0:
            problems.append("torchrun succeeded with a rank killed")
        if "stopped by its launcher" not in err:
            problems.append(f"rank 0 does not say the launcher stopped it: {err[-600:]!r}")
        t.unit("torchrun, rank 1 of 2 killed", problems)

    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
