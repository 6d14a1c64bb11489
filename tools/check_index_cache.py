#!/usr/bin/env python3
"""The persistent index through the CLI's front door, on checkpoints real torch writes.

    python tools/check_index_cache.py --cli shardscope-cli

Saves a DCP checkpoint of a few thousand tensors with torch.distributed.checkpoint, then runs
`shardscope-cli inspect --json` (and `diff`) with the cache off, cold and warm, and checks:
- the three outputs are the same, and the warm one's keys, dtypes, shapes and chunks are what
  torch's own `FileSystemReader.read_metadata()` reads;
- the cold run wrote one entry into SHARDSCOPE_CACHE_DIR and the warm run read it;
  `--no-cache` (before or after the command) and SHARDSCOPE_NO_CACHE=1 write nothing;
- without SHARDSCOPE_CACHE_DIR the entry goes to $XDG_CACHE_HOME/shardscope/index, and
  without that to ~/.cache/shardscope/index;
- the checkpoint saved again in place with a tensor of another shape reads as torch reads it;
- an entry overwritten with junk is ignored with a note naming it, the output unchanged;
- a cache of SHARDSCOPE_CACHE_MAX_MB=0 stores nothing.
Prints "N passed, M failed".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

DTYPE = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def save(path: Path, rows: int) -> None:
    sd = {}
    for layer in range(400):
        for name, dt in (("weight", torch.bfloat16), ("bias", torch.float32)):
            sd[f"model.layers.{layer}.mlp.{name}"] = torch.zeros(rows if name == "weight" else 4,
                                                                 4, dtype=dt)
        sd[f"model.layers.{layer}.norm.weight"] = torch.ones(4, dtype=torch.float16)
    sd["step"] = 7
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(str(path)), no_dist=True)


def torch_view(path: Path) -> dict:
    md = FileSystemReader(str(path)).read_metadata()
    out = {}
    for key, m in md.state_dict_metadata.items():
        if hasattr(m, "chunks"):
            out[key] = (DTYPE[m.properties.dtype], list(m.size),
                        sorted((list(c.offsets), list(c.sizes)) for c in m.chunks))
    return out


def our_view(j: dict) -> dict:
    return {t["key"]: (t["dtype"], t["shape"],
                       sorted((c["offsets"], c["sizes"]) for c in t["chunks"]))
            for t in j["tensors"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    a = ap.parse_args()
    t = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ckpt, cache = root / "ckpt", root / "cache"
        save(ckpt, 8)
        base = {k: v for k, v in os.environ.items()
                if k not in ("SHARDSCOPE_CACHE_DIR", "SHARDSCOPE_NO_CACHE", "XDG_CACHE_HOME")}
        base.update(SHARDSCOPE_CACHE_MIN_BYTES="0", SHARDSCOPE_CACHE_SETTLE_SECONDS="0",
                    HOME=str(root / "home"))

        def run(*args: str, **env: str) -> tuple[int, str, str]:
            p = subprocess.run([a.cli, *args], capture_output=True, text=True, timeout=300,
                               env={**base, **env})
            return p.returncode, p.stdout, p.stderr

        def inspect(*extra: str, **env: str) -> dict:
            code, out, err = run("inspect", str(ckpt), "--json", *extra, **env)
            if code not in (0, 1):
                raise SystemExit(f"inspect exited {code}: {err}")
            return json.loads(out)

        def entries(d: Path) -> list[Path]:
            return sorted(d.glob("*.ssidx")) if d.exists() else []

        def same(x: dict, y: dict) -> bool:
            strip = lambda j: {**j, "info": {k: v for k, v in j["info"].items()
                                             if k != "index_cache"}}
            return strip(x) == strip(y)

        env = {"SHARDSCOPE_CACHE_DIR": str(cache)}
        off = inspect("--no-cache", **env)
        t.unit("--no-cache after the command writes nothing",
               [] if not entries(cache) else [f"{entries(cache)}"])
        code, out, _ = run("--no-cache", "inspect", str(ckpt), "--json", **env)
        t.unit("--no-cache before the command writes nothing",
               [] if code == 0 and not entries(cache) else [f"exit {code}, {entries(cache)}"])
        inspect(SHARDSCOPE_NO_CACHE="1", **env)
        t.unit("SHARDSCOPE_NO_CACHE=1 writes nothing",
               [] if not entries(cache) else [f"{entries(cache)}"])
        cold = inspect(**env)
        warm = inspect(**env)
        note_cold = cold["info"].get("index_cache", "")
        note_warm = warm["info"].get("index_cache", "")
        t.unit("cold run writes one entry", [] if len(entries(cache)) == 1 and
               note_cold.startswith("writing to " + str(cache)) else [note_cold])
        t.unit("warm run reads it", [] if note_warm.startswith("read from " + str(cache))
               else [note_warm])
        t.unit("off, cold and warm give the same output",
               [] if same(off, cold) and same(off, warm) else ["outputs differ"])
        oracle = torch_view(ckpt)
        t.unit("the warm index is what torch reads",
               [] if our_view(warm) == oracle else ["keys, dtypes, shapes or chunks differ"])

        code0, d0, _ = run("diff", str(ckpt), str(ckpt), "--json", "--no-cache", **env)
        code1, d1, _ = run("diff", str(ckpt), str(ckpt), "--json", **env)
        t.unit("diff reads through it, with the same result",
               [] if (code0, d0) == (code1, d1) else [f"exit {code0} vs {code1}"])

        xdg = root / "xdg"
        got = inspect(XDG_CACHE_HOME=str(xdg))
        t.unit("XDG_CACHE_HOME/shardscope/index",
               [] if entries(xdg / "shardscope" / "index") and same(got, off)
               else [got["info"].get("index_cache", "")])
        got = inspect()
        t.unit("~/.cache/shardscope/index",
               [] if entries(root / "home" / ".cache" / "shardscope" / "index")
               else [got["info"].get("index_cache", "")])

        # Saved again in place: every file rewritten, one tensor with more rows.
        save(ckpt, 16)
        again = inspect(**env)
        t.unit("saved again in place: read as torch reads it",
               [] if our_view(again) == torch_view(ckpt) and our_view(again) != oracle
               else [again["info"].get("index_cache", "")])
        t.unit("saved again in place: then read from the cache",
               [] if inspect(**env)["info"].get("index_cache", "").startswith("read from")
               else ["not read"])

        for e in entries(cache):
            e.write_bytes(b"junk" * 100)
        junk = inspect(**env)
        note = junk["info"].get("index_cache", "")
        t.unit("a junk entry is ignored with a note naming it",
               [] if note.startswith("ignored ") and str(cache) in note and
               our_view(junk) == torch_view(ckpt) else [note])

        small = root / "small"
        got = inspect(SHARDSCOPE_CACHE_DIR=str(small), SHARDSCOPE_CACHE_MAX_MB="0")
        t.unit("SHARDSCOPE_CACHE_MAX_MB=0 stores nothing",
               [] if not entries(small) and got["info"].get("index_cache", "").startswith(
                   "not written") else [got["info"].get("index_cache", "")])
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
