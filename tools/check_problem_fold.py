#!/usr/bin/env python3
"""A flood of problems folds: a checkpoint with a data file missing prints one stderr line for
that file (naming it, the count and the cause), `--all-problems` one line per key, and the JSON's
per-key problems and the exit code stay what they were. The keys come from torch's own metadata:
every key with an item in the removed file is unreadable, and no other key is.

    check_problem_fold.py --cli shardscope-cli --demo resources/demo/dsv3-mini
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch.distributed.checkpoint as dcp


def run(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--demo", required=True)
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "demo"
        shutil.copytree(a.demo, ckpt)
        data = next(ckpt.glob("iter_*"))
        victim = "__1_0.distcp"
        (data / victim).unlink()
        md = dcp.FileSystemReader(str(data)).read_metadata()
        want = sorted({i.fqn for i, info in md.storage_data.items() if info.relative_path == victim})

        rc, _, err = run([a.cli, "inspect", str(ckpt)])
        lines = [l for l in err.splitlines() if l.startswith("problem: ")]
        if rc != 1:
            failures.append(f"inspect exit {rc}, expected 1")
        if len(lines) != 1:
            failures.append(f"{len(lines)} problem lines, expected one for the missing file: {lines[:3]}")
        elif not (victim in lines[0] and f"{len(want):,} keys unreadable" in lines[0]
                  and "data file is missing" in lines[0] and "--all-problems" in lines[0]):
            failures.append(f"folded line lacks the file, count or cause: {lines[0]!r}")

        rc, _, err = run([a.cli, "inspect", "--all-problems", str(ckpt)])
        keys = sorted(l.split("key '", 1)[1].split("'", 1)[0]
                      for l in err.splitlines() if l.startswith("problem: ") and "key '" in l)
        if rc != 1 or keys != want:
            failures.append(f"--all-problems: exit {rc}, {len(keys)} keys, torch says {len(want)}")

        rc, out, _ = run([a.cli, "inspect", "--json", str(ckpt)])
        got = sorted(p["key"] for p in json.loads(out)["problems"] if p["effect"] == "unreadable")
        if rc != 1 or got != want:
            failures.append(f"--json problems: exit {rc}, {len(got)} keys, torch says {len(want)}")
    for f in failures:
        print("FAIL:", f)
    print(f"{1 if not failures else 0} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
