#!/usr/bin/env python3
"""Seed corpora for the fuzz harnesses (fuzz/), from the files real torch wrote for the tests.

    python tools/make_fuzz_seeds.py --build build --out build-fuzz/seeds

Takes the test fixtures (build/fixtures, build/layout-fixtures, build/pickles: written by
tools/make_fixtures.py, make_layout_fixtures.py and make_pickles.py with real torch and the
safetensors package) and sorts their files into one directory per harness: pickles and DCP
.metadata files, torch.save archives, safetensors files and indexes, Megatron checkpoint roots
(their four files joined as megatron_fuzzer.cpp expects), layouts, model configs, and report
names, and the persistent index entries the CLI stores for the DCP fixtures. The broken inputs
of fixtures/bad are seeds too. Small files only (the fuzzer mutates
every byte): larger ones are skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
import zipfile
from pathlib import Path

MAX_SEED = 256 << 10
ROOT = Path(__file__).resolve().parent.parent


def put(out: Path, harness: str, data: bytes) -> None:
    if not data or len(data) > MAX_SEED:
        return
    d = out / harness
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def small_files(root: Path):
    if not root.exists():
        return
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.stat().st_size <= MAX_SEED:
            yield p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cli", type=Path, help="shardscope-cli, to write layouts from the configs")
    a = ap.parse_args()
    fixtures, layouts, pickles = a.build / "fixtures", a.build / "layout-fixtures", a.build / "pickles"
    if not fixtures.exists():
        raise SystemExit(f"{fixtures}: no test fixtures (run ./dev test once)")

    for p in small_files(pickles):
        if p.suffix == ".pkl":
            put(a.out, "pickle", p.read_bytes())
    for root in (fixtures, layouts, ROOT / "resources/demo"):
        for p in small_files(root):
            data = p.read_bytes()
            name = p.name
            if name == ".metadata" or name.endswith(".metadata"):
                put(a.out, "dcp", data)
                put(a.out, "pickle", data)
            elif p.suffix in (".pt", ".bin") or data[:4] == b"PK\x03\x04":
                put(a.out, "torchsave", data)
                put(a.out, "zip", data)
                try:
                    with zipfile.ZipFile(p) as z:
                        for n in z.namelist():
                            if n.endswith(".pkl"):
                                put(a.out, "pickle", z.read(n))
                except (zipfile.BadZipFile, OSError, ValueError):
                    pass
            elif p.suffix == ".safetensors":
                put(a.out, "safetensors", data)
            elif name.endswith(".index.json"):
                put(a.out, "safetensors_index", data)
            elif p.suffix == ".json":
                try:
                    j = json.loads(data)
                except ValueError:
                    continue
                if isinstance(j, dict) and "params" in j:
                    put(a.out, "layout", data)
                elif isinstance(j, dict) and ("num_hidden_layers" in j or "num_layers" in j
                                              or "hidden_size" in j):
                    put(a.out, "config", b"\x00" + data)  # config.json
                    put(a.out, "config", b"\x01" + data)  # Megatron arguments as JSON
                    if a.cli:  # and the layout ShardScope writes for it
                        with tempfile.TemporaryDirectory() as tmp:
                            out = Path(tmp) / "layout.json"
                            subprocess.run([str(a.cli), "layout", "--from-config", str(p), "-o",
                                            str(out)], capture_output=True, timeout=120)
                            if out.exists():
                                put(a.out, "layout", out.read_bytes())

    # Megatron roots: the tracker, then metadata.json, common.pt and .metadata of its iteration.
    for tracker in sorted(fixtures.rglob("latest_checkpointed_iteration.txt")):
        text = tracker.read_bytes()
        it = text.strip().decode("ascii", "replace")
        d = tracker.parent / ("release" if it == "release" else f"iter_{int(it):07d}"
                              if it.isdigit() else it)
        parts = [text]
        for f in ("metadata.json", "common.pt", ".metadata"):
            p = d / f
            parts.append(p.read_bytes() if p.exists() and p.stat().st_size <= MAX_SEED else b"")
        put(a.out, "megatron", b"@@@@".join(parts))

    # Megatron argument text, as a launch script passes it.
    put(a.out, "config", b"\x02--num-layers 4 --hidden-size 64 --num-attention-heads 4 "
        b"--ffn-hidden-size 128 --swiglu --vocab-size 128 --seq-length 32\n")
    put(a.out, "config", b"\x03torchrun pretrain_gpt.py --num-layers 2 --hidden-size 32 "
        b"--num-attention-heads 2 --multi-latent-attention --q-lora-rank 16 --kv-lora-rank 8 "
        b"--num-experts 4 --moe-grouped-gemm --mtp-num-layers 1\n")

    # Persistent index entries: what the CLI stores for each DCP fixture.
    if a.cli:
        import os
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, SHARDSCOPE_CACHE_DIR=cache, SHARDSCOPE_CACHE_MIN_BYTES="0",
                       SHARDSCOPE_CACHE_SETTLE_SECONDS="0")
            env.pop("SHARDSCOPE_NO_CACHE", None)
            for meta in sorted(fixtures.rglob(".metadata")):
                subprocess.run([str(a.cli), "inspect", str(meta.parent)], capture_output=True,
                               timeout=120, env=env)
            for p in small_files(Path(cache)):
                put(a.out, "indexcache", p.read_bytes())

    # Report names: the checkpoint, four keys and an unconsumed one, cut at "\n@\n".
    hostile = ["/ckpt/\x1b]0;t\x07", "model.\x1b[31mx\nproblem: fake", "<script>a</script>",
               "$(touch p) 'q' \"d\"", "a`b|c`|", "\u202eevil\udc80"]
    put(a.out, "report", "\n@\n".join(hostile).encode("utf-8", "surrogatepass"))
    put(a.out, "report", b"\n@\n".join([b"/ckpt", b"model.decoder.layers.0.mlp.linear_fc1.weight",
                                         b"k", b"model.decoder.layers.{0..3}.x", b"ok", b"stray"]))

    counts = {d.name: sum(1 for _ in d.iterdir()) for d in sorted(a.out.iterdir()) if d.is_dir()}
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
