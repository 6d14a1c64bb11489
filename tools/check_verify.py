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

With --truncate a copy of the checkpoint has its biggest data file cut short: the parameters
whose stored keys lost bytes (torch's own storage_data says which) must be reported unreadable,
torch's load of such a key must raise, and every other parameter must still be bit-identical.
With --damage zero|overwrite|text the file keeps its size but not its bytes (a range across a
third of it zeroed, an item's first bytes overwritten, the file replaced by a small text file):
the stored keys whose bytes changed are each loaded alone by torch's dcp.load, and the
parameters stored in exactly those that raise must be reported unreadable, per parameter.

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


def cut_short(ckpt: Path, tmp: Path) -> tuple[str, set[str]]:
    """A copy of `ckpt` whose biggest data file ends at the item of its last third of model keys
    (by offset); returns the copy and the stored model keys that lost bytes."""
    import shutil
    copy = tmp / "cut"
    shutil.copytree(ckpt, copy)
    _, real = oracle.resolve(copy)
    md = oracle.dcp_metadata(real)
    files: dict[str, list[tuple[int, str]]] = {}
    for idx, item in md.storage_data.items():
        if idx.fqn.startswith("model."):
            files.setdefault(item.relative_path, []).append((item.offset, idx.fqn))
    rel = max(files, key=lambda r: (real / r).stat().st_size)
    items = sorted(files[rel])
    cut = items[len(items) * 2 // 3][0]
    with open(real / rel, "r+b") as f:
        f.truncate(cut)
    return str(copy), {fqn for off, fqn in items if off >= cut}


def damage(ckpt: Path, tmp: Path, how: str) -> tuple[str, set[str]]:
    """A copy of `ckpt` whose biggest data file is damaged `how`; returns the copy and the stored
    model keys torch's dcp.load raises on, each tried alone (keys whose bytes the damage left
    alone read as before)."""
    import shutil
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    copy = tmp / "damaged"
    shutil.copytree(ckpt, copy)
    _, real = oracle.resolve(copy)
    md = oracle.dcp_metadata(real)
    items = sorted((i.relative_path, i.offset, i.length, k.fqn) for k, i in md.storage_data.items())
    rel = max({it[0] for it in items}, key=lambda r: (real / r).stat().st_size)
    size = (real / rel).stat().st_size
    mine = [it for it in items if it[0] == rel]
    if how == "zero":
        lo, hi = size // 3 + 5, 2 * size // 3 - 7
    elif how == "overwrite":
        _, lo, n, _ = next(it for it in mine[len(mine) // 2:] if it[3].startswith("model."))
        hi = lo + min(64, n)
    else:
        lo, hi = 0, size
    with open(real / rel, "r+b") as f:
        if how == "text":
            f.truncate(0)
            f.write(b"moved to cold storage, see the ticket\n")
        else:
            f.seek(lo)
            f.write(bytes(hi - lo) if how == "zero" else (b"overwritten!" * 6)[:hi - lo])
    touched = {k for _, off, n, k in mine if off < hi and off + n > lo and k.startswith("model.")}
    lost = set()
    for k in sorted(touched):
        v = md.state_dict_metadata[k]
        try:
            dcp.load({k: torch.empty(tuple(v.size), dtype=v.properties.dtype)},
                     storage_reader=FileSystemReader(str(real)),
                     planner=DefaultLoadPlanner(flatten_state_dict=False, allow_partial_load=True),
                     no_dist=True)
        except BaseException as ex:  # noqa: BLE001 - CheckpointException
            if isinstance(ex, (KeyboardInterrupt, SystemExit)):
                raise
            lost.add(k)
    if not lost:
        raise SystemExit(f"--damage {how}: torch reads every key of {rel}: nothing to test")
    return str(copy), lost


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--negative", action="store_true")
    ap.add_argument("--launch", action="store_true", help="run as --dp processes under torchrun")
    ap.add_argument("--max-memory", type=int, default=0, help="a budget that makes some stream")
    ap.add_argument("--truncate", action="store_true", help="cut a data file short first")
    ap.add_argument("--damage", choices=("zero", "overwrite", "text"),
                    help="damage a data file's bytes first, keeping its size (text: not)")
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
    lost: set[str] = set()
    if a.truncate:
        a.checkpoint, lost = cut_short(Path(a.checkpoint), tmp)
    elif a.damage:
        import logging
        logging.disable(logging.CRITICAL)  # dcp.load logs each failed read's traceback
        a.checkpoint, lost = damage(Path(a.checkpoint), tmp, a.damage)
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

    def disk(name: str) -> str:  # Megatron-FSDP's on-disk name (docs/formats.md §6.7)
        return "model.module." + name.replace(inner, ".transformer_layer.")

    # Megatron-FSDP names decoder layers per pipeline stage (NVIDIA/Megatron-LM#7452): under
    # pp > 1 a stage asks for decoder.layers.0… for its own layers, so a checkpoint saved at
    # another pp fills them from another layer's keys (or finds none). Megatron's split.
    import re
    layer_of = lambda n: int(m[1]) if (m := re.match(r"decoder\.layers\.(\d+)\.", n)) else -1
    n_layers = 1 + max(layer_of(p["name"]) for p in layout["params"])
    counts = [0] * a.pp
    if a.pp > 1:
        first, last = a.pp_first_layers, a.pp_last_layers
        even = a.pp - (first > 0) - (last > 0)
        each = (n_layers - first - last) // even if even else 0
        counts = [first if s == 0 and first else last if s == a.pp - 1 and last else each
                  for s in range(a.pp)]
    offsets, at = [], 0
    for c in counts:
        offsets.append(at)
        at += c

    def stage_local(n: str, layer: int) -> str:
        if layer < 0 or a.pp == 1:
            return n
        off = max(o for o in offsets if o <= layer)
        return n.replace(f"decoder.layers.{layer}.", f"decoder.layers.{layer - off}.", 1)

    mla = set()
    elsewhere: set[str] = set()  # filled from another layer's keys
    missing: set[str] = set()    # no key under its stage-local name: kept at initial values
    unreadable: set[str] = set()
    torch_raises: list[str] = []
    checked = 0
    buffers = 0
    for prm in layout["params"]:
        # Buffers (a router's expert_bias) are loaded whole by every rank of their stage: checked
        # like parameters, against torch's load of their key.
        buffers += prm.get("optimizer_state") is False
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
        layer = layer_of(name)
        keys = [disk(stage_local(n, layer)) for n in parts]
        moved = stage_local(name, layer) != name
        if moved and not all(k in md.state_dict_metadata for k in keys):
            missing.add(name)
            if x["outcome"] != "kept_initial_values":
                failures.append(f"{name}: {x['outcome']}, want kept_initial_values (no {keys[0]})")
            continue
        if lost & set(keys):
            unreadable.add(name)
            if x["outcome"] != "unreadable" or "cannot be read" not in x["note"]:
                failures.append(f"{name}: {x['outcome']} ({x['note']}), want unreadable")
            if not torch_raises:  # torch's own load of that key, once
                try:
                    oracle.dcp_load(real, md, sorted(lost & set(keys))[:1])
                    failures.append(f"torch loads {sorted(lost & set(keys))[0]}, cut short")
                except BaseException as ex:  # noqa: BLE001 - CheckpointException
                    if isinstance(ex, (KeyboardInterrupt, SystemExit)):
                        raise
                    torch_raises.append(type(ex).__name__)
            continue
        loaded = oracle.dcp_load(real, md, keys)
        full = torch.cat([loaded[k] for k in keys], dim=0) if len(keys) > 1 else loaded[keys[0]]
        if moved and list(full.shape) != list(prm["shape"]):
            missing.add(name)  # stored with another shape: not loaded
            if x["outcome"] != "kept_initial_values":
                failures.append(f"{name}: {x['outcome']}, want kept_initial_values ({keys[0]} "
                                f"has shape {list(full.shape)})")
            continue
        want = oracle.sha256(full)
        checked += 1
        outcome = "wrong_source" if moved else "bit_identical"
        if moved:
            elsewhere.add(name)
        if x["outcome"] != outcome or x["sha256"] != want or not x["round_trip"]:
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
    want_kept = (mla if a.negative else set()) | missing
    if kept != want_kept:
        failures.append(f"kept at initial values: {sorted(kept ^ want_kept)}")
    if got.get("wrong_source") != len(elsewhere):
        failures.append(f"{got.get('wrong_source')} from the wrong key, torch's names say "
                        f"{len(elsewhere)}")
    if got.get("not_checked") != 0 or (buffers and checked + len(missing) + len(unreadable) < buffers):
        failures.append(f"{got.get('not_checked')} not checked ({buffers} buffers in the layout)")
    # What it did and did not prove is said plainly: chunks misplaced at save time round-trip.
    if not got.get("proves") or not any("2769" in line for line in got.get("does_not_prove", [])):
        failures.append(f"proves {got.get('proves')}, does not prove {got.get('does_not_prove')}")
    if got["world"] != world:
        failures.append(f"world {got['world']}, want {world}")
    par = got["parallel"]
    if [par[k] for k in ("tp", "dp", "pp", "ep", "etp")] != [a.tp, a.dp, a.pp, a.ep, a.etp]:
        failures.append(f"planned {par}")
    want_procs, want_backend = (world, "gloo") if a.launch else (1, "none")
    if got["processes"] != want_procs or got["backend"] != want_backend:
        failures.append(f"{got['processes']} processes over {got['backend']}, want "
                        f"{want_procs} over {want_backend}")
    if (a.truncate or a.damage) and (not unreadable or got["unreadable"] != len(unreadable)):
        failures.append(f"{got['unreadable']} reported unreadable, torch's metadata says "
                        f"{len(unreadable)}")
    if (p.returncode == 0) != (not a.negative and not a.truncate and not a.damage and not elsewhere
                               and not missing):
        failures.append(f"exit {p.returncode}")
    for f in failures:
        print("FAIL", f)
    print(f"{checked} parameters against torch over {world} ranks (tp {a.tp}, dp {a.dp}, "
          f"pp {a.pp}, ep {a.ep}, etp {a.etp})"
          f"{' in ' + str(world) + ' processes' if a.launch else ''}"
          f"{' (MLA rule disabled: ' + str(len(mla)) + ' kept at init)' if a.negative else ''}"
          f"{' (cut short: ' + str(len(unreadable)) + ' unreadable)' if a.truncate else ''}"
          f"{' (damaged, ' + a.damage + ': ' + str(len(unreadable)) + ' unreadable)' if a.damage else ''}: "
          f"{'ok' if not failures else str(len(failures)) + ' failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
