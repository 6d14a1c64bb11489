#!/usr/bin/env python3
"""Values that look like a fresh initialization are flagged ("the experts are still random"),
trained-looking ones never: a checkpoint written by torch's DCP holds tensors drawn exactly as
Megatron initialises them (torch.nn.init.normal_ with init_method_std 0.02, a norm's ones, a
bias's zeros) beside the same draws moved a little, as training moves them, and a draw too small
to tell. `inspect --stats --json` and `diff --check-init` must flag exactly the fresh ones.

    check_init_likeness.py --cli shardscope-cli
"""
import argparse
import json
import subprocess
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    a = ap.parse_args()
    g = torch.Generator().manual_seed(7)
    fresh = torch.nn.init.normal_(torch.empty(512, 64), std=0.02, generator=g)
    state = {
        "fresh.weight": fresh.clone(),
        "fresh_bf16.weight": torch.nn.init.normal_(torch.empty(256, 64), std=0.02, generator=g)
        .to(torch.bfloat16),
        "norm.weight": torch.ones(64),
        "bias": torch.zeros(64),
        # As a few hundred steps move them: a drift of the mean, a change of scale.
        "trained_shift.weight": fresh + 0.001,
        "trained_scale.weight": fresh * 1.1,
        "trained_norm.weight": torch.ones(64) + 0.01 * torch.randn(64, generator=g),
        "small.weight": torch.nn.init.normal_(torch.empty(4, 4), std=0.02, generator=g),
    }
    want = {"fresh.weight", "fresh_bf16.weight", "norm.weight", "bias"}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        dcp.save(state, checkpoint_id=tmp)
        p = subprocess.run([a.cli, "inspect", tmp, "--stats", "--json"], capture_output=True,
                           text=True, timeout=300)
        d = json.loads(p.stdout)
        got = {t["key"] for t in d["tensors"] if t.get("looks_initial")}
        if got != want:
            failures.append(f"flagged {sorted(got)}, the fresh ones are {sorted(want)}")
        p = subprocess.run([a.cli, "inspect", tmp, "--stats", "--json", "--init-std", "0"],
                           capture_output=True, text=True, timeout=300)
        normal = {t["key"] for t in json.loads(p.stdout)["tensors"] if t.get("looks_initial")}
        if normal != {"norm.weight", "bias"}:
            failures.append(f"--init-std 0 still flags draws: {sorted(normal)}")
        # The diff reads what the load fills each parameter with: the same ones.
        layout = {"schema": "shardscope.layout/1", "family": "test", "source": "init",
                  "params": [{"name": k, "shape": list(v.shape),
                              "dtype": str(v.dtype).split(".")[-1]} for k, v in state.items()]}
        lay = f"{tmp}.layout.json"
        with open(lay, "w") as f:
            json.dump(layout, f)
        p = subprocess.run([a.cli, "diff", tmp, "--layout", lay, "--json", "--check-init"],
                           capture_output=True, text=True, timeout=300)
        d = json.loads(p.stdout)
        got = {e["name"] for e in d["entries"] if e.get("looks_initial")}
        if got != want or p.returncode != 0 or not any(
                w.startswith(f"init: {len(want)} parameters") for w in d["outcome"]["warnings"]):
            failures.append(f"diff --check-init: exit {p.returncode}, flagged {sorted(got)}, "
                            f"warnings {d['outcome']['warnings']}")
    for f in failures:
        print("FAIL:", f)
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
