#!/usr/bin/env python3
"""Acceptance checks of `shardscope-cli verify` against torch: every parameter gathered from the
planned ranks' shards must hash like the tensor torch itself builds from the stored components
(`dcp.load` of each component, `torch.cat` of the sections in the layout's order).

    check_verify.py --cli CLI --checkpoint DIR --config CONFIG.json --dp N [--negative] [--launch]

With --negative the MLA rule is disabled (seed 000's control): exactly the fused MLA parameters
(the ones whose sections or absorbed norm live in other keys) must be reported as keeping their
initial values, and everything else still bit-identical.

With --max-memory BYTES the budget is small enough that the biggest parameters stream through
windows of rows: none may be skipped, some must stream, and their statistics, histograms and
fingerprints must equal those of a run without a budget (and their SHA-256 torch's, as always).

With --launch the CLI runs as N processes under torchrun (each rank's reads in its own process,
shards all-gathered over c10d's Gloo on loopback), and the report must say so.

--tp, --pp, --ep and --etp plan Megatron's other parallel dims: N = tp × dp × pp ranks, each
reading its TP-local slice (a fused parameter's rows of each section, a row-parallel one's
columns) of its stage's parameters and its EP rank's experts.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracle  # noqa: E402
import torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--negative", action="store_true")
    ap.add_argument("--launch", action="store_true", help="run as --dp processes under torchrun")
    ap.add_argument("--max-memory", type=int, default=0, help="a budget that makes some stream")
    for dim in ("tp", "pp", "ep", "etp"):
        ap.add_argument("--" + dim, type=int, default=1)
    ap.add_argument("--pp-first-layers", type=int, default=0)
    ap.add_argument("--pp-last-layers", type=int, default=0)
    a = ap.parse_args()
    world = a.tp * a.dp * a.pp
    failures: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="ss-verify-"))
    lay_path = tmp / "layout.json"
    subprocess.run([a.cli, "layout", "--from-config", a.config, "-o", str(lay_path)], check=True,
                   capture_output=True)
    layout = json.loads(lay_path.read_text())
    cmd = [a.cli, "verify", a.checkpoint, "--layout", str(lay_path), "--dp", str(a.dp), "--json",
           "--hash", "--tp", str(a.tp), "--pp", str(a.pp), "--ep", str(a.ep), "--etp", str(a.etp),
           "--pp-first-layers", str(a.pp_first_layers), "--pp-last-layers", str(a.pp_last_layers)]
    if a.negative:
        cmd += ["--disable-rule", "mla_down_proj"]
    reference = None
    if a.max_memory:
        reference = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                                              check=False).stdout)
        cmd += ["--max-memory", str(a.max_memory)]
    if a.launch:
        # --standalone: the agent picks a free port itself (a port chosen here could be taken
        # by a test running beside this one before torchrun binds it).
        cmd = [sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
               "--nproc-per-node", str(world)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode == 2:
        print("verify could not run:", p.stderr)
        return 1
    got = json.loads(p.stdout)
    by_name = {x["name"]: x for x in got["params"]}

    _, real = oracle.resolve(Path(a.checkpoint))
    md = oracle.dcp_metadata(real)
    inner = "." + layout.get("mtp_inner", "mtp_model_layer") + "."

    def disk(name: str) -> str:  # Megatron-FSDP's on-disk name (formats.md §6.7)
        return "model.module." + name.replace(inner, ".transformer_layer.")

    mla = set()
    checked = 0
    for prm in layout["params"]:
        if prm.get("optimizer_state") is False:
            continue  # buffers are not in FSDP's buffers
        name = prm["name"]
        fusion = prm.get("fusion")
        if fusion and fusion["rule"] == "mla_down_proj" or prm.get("absorbs", "").endswith(
                "input_layernorm.weight") and "linear_qkv_down_proj" in name:
            mla.add(name)
        x = by_name.get(name)
        if x is None:
            failures.append(f"{name}: not verified")
            continue
        if a.negative and name in mla:
            if x["outcome"] != "kept_initial_values":
                failures.append(f"{name}: {x['outcome']}, want kept_initial_values")
            continue
        parts = [s["name"] for s in fusion["sections"]] if fusion else [prm.get("absorbs") or name]
        keys = [disk(n) for n in parts]
        loaded = oracle.dcp_load(real, md, keys)
        full = torch.cat([loaded[k] for k in keys], dim=0) if len(keys) > 1 else loaded[keys[0]]
        want = oracle.sha256(full)
        checked += 1
        if x["outcome"] != "bit_identical" or x["sha256"] != want or not x["round_trip"]:
            failures.append(f"{name}: {x['outcome']}, sha256 {x['sha256'][:12]} vs torch "
                            f"{want[:12]}, round trip {x['round_trip']}")
    if reference is not None:
        streamed = [x["name"] for x in got["params"] if "streamed in" in x["note"]]
        skipped = [x["name"] for x in got["params"] if x["outcome"] == "skipped"]
        if not streamed or skipped:
            failures.append(f"--max-memory {a.max_memory}: {len(streamed)} streamed, "
                            f"skipped {skipped}")
        ref = {x["name"]: x for x in reference["params"]}
        for x in got["params"]:
            r = ref.get(x["name"])
            if r is None or any(x[k] != r[k] for k in ("stats", "fingerprint", "sha256",
                                                          "outcome")):
                failures.append(f"{x['name']}: differs from the run without a budget")
        print(f"{len(streamed)} parameters streamed under --max-memory {a.max_memory}")
    kept = {x["name"] for x in got["params"] if x["outcome"] == "kept_initial_values"}
    if kept != (mla if a.negative else set()):
        failures.append(f"kept at initial values: {sorted(kept ^ (mla if a.negative else set()))}")
    if got["world"] != world:
        failures.append(f"world {got['world']}, want {world}")
    par = got["parallel"]
    if [par[k] for k in ("tp", "dp", "pp", "ep", "etp")] != [a.tp, a.dp, a.pp, a.ep, a.etp]:
        failures.append(f"planned {par}")
    want_procs, want_backend = (world, "gloo") if a.launch else (1, "none")
    if got["processes"] != want_procs or got["backend"] != want_backend:
        failures.append(f"{got['processes']} processes over {got['backend']}, want "
                        f"{want_procs} over {want_backend}")
    if (p.returncode == 0) != (not a.negative):
        failures.append(f"exit {p.returncode}")
    for f in failures:
        print("FAIL", f)
    print(f"{checked} parameters against torch over {world} ranks (tp {a.tp}, dp {a.dp}, "
          f"pp {a.pp}, ep {a.ep}, etp {a.etp})"
          f"{' in ' + str(world) + ' processes' if a.launch else ''}"
          f"{' (MLA rule disabled: ' + str(len(mla)) + ' kept at init)' if a.negative else ''}: "
          f"{'ok' if not failures else str(len(failures)) + ' failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
