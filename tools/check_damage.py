#!/usr/bin/env python3
"""Data files whose bytes are not what the metadata says: the keys `shardscope-cli inspect` calls
unreadable are exactly those torch's own read raises on.

    check_damage.py --cli shardscope-cli --fixtures FIXTURES [CASE...]

Checkpoints written by real torch (and the safetensors package) are copied and damaged the ways
a data file goes bad: a range zeroed, an item's first bytes overwritten, the file replaced by a
small text file of the same name, each of its records' bytes zeroed or overwritten in turn. A
file keeps its size in most of these, so only its bytes tell. For every key the expected verdict
is torch's own: `dcp.load` of that key alone (DCP), `safe_open(...).get_tensor` (safetensors
sets), `torch.load(shard, weights_only=True)` (a transformers `pytorch_model.bin` set). Each
key inspect calls unreadable must name the damaged file and an offset; keys of intact files and
intact bytes stay healthy.

Cases: dcp_windows (every 8-byte window of each item's first and last 1,100 bytes of a small DCP
zeroed, or set to 0xff, one at a time), dcp (a range zeroed across items, an item's start
overwritten, a data file replaced by text), dcp_zstd (zstd-transformed items: an item's start
overwritten, text, and a range zeroed, read with --hash, which undoes every item), dcp_sampled (a
DCP the open samples (2,000 items, SHARDSCOPE_ITEM_SAMPLE=20): a zeroed run of items is found
and its file checked whole; a single damaged item between samples is named by inspect --hash;
keys whose bytes no damage touched are not loaded, they read as before),
safetensors (a sharded set: header zeroed or overwritten, text, a data range zeroed) and bin (a
sharded torch.save set: its start or its central directory zeroed, text).

Prints one line per failure and "N passed, M failed"; exits 0 only when all pass.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader, FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint.metadata import BytesStorageMetadata  # noqa: E402
from tally import Tally  # noqa: E402

warnings.filterwarnings("ignore", message="torch.distributed is disabled")
# dcp.load logs each failed read's traceback at ERROR: the failures are the point here.
import logging  # noqa: E402

logging.disable(logging.CRITICAL)

TEXT = b"this file was replaced by a note: the checkpoint moved to cold storage\n"


# ---------------------------------------------------------------------------------------------
# What torch reads
# ---------------------------------------------------------------------------------------------

def dcp_items(path: Path) -> list[tuple[str, int, int, str]]:
    """(file, offset, length, key) of every stored item, by file and offset."""
    md = FileSystemReader(str(path)).read_metadata()
    return sorted((i.relative_path, i.offset, i.length, k.fqn) for k, i in md.storage_data.items())


def torch_dcp_unreadable(path: Path, keys=None) -> set[str]:
    """The keys `dcp.load` raises on, each loaded alone (BYTE_IO through the default planner's
    torch.load, tensors into buffers of the metadata's shape and dtype)."""
    md = FileSystemReader(str(path)).read_metadata()
    bad = set()
    for k, v in md.state_dict_metadata.items():
        if keys is not None and k not in keys:
            continue
        sd = {k: None if isinstance(v, BytesStorageMetadata)
              else torch.empty(tuple(v.size), dtype=v.properties.dtype)}
        try:
            dcp.load(sd, storage_reader=FileSystemReader(str(path)),
                     planner=DefaultLoadPlanner(flatten_state_dict=False, allow_partial_load=True),
                     no_dist=True)
        except BaseException as e:  # noqa: BLE001 - CheckpointException is one
            if isinstance(e, KeyboardInterrupt):
                raise
            bad.add(k)
    return bad


def torch_set_unreadable(index: Path) -> set[str]:
    """Keys of a safetensors or torch.save shard set that their reader raises on."""
    weight_map = json.loads(index.read_text())["weight_map"]
    bad = set()
    for shard in dict.fromkeys(weight_map.values()):
        keys = [k for k, f in weight_map.items() if f == shard]
        path = index.parent / shard
        if shard.endswith(".safetensors"):
            from safetensors import safe_open
            try:
                with safe_open(str(path), framework="pt") as f:
                    for k in keys:
                        try:
                            f.get_tensor(k)
                        except Exception:  # noqa: BLE001
                            bad.add(k)
            except Exception:  # noqa: BLE001 - the header itself
                bad.update(keys)
        else:
            try:
                sd = torch.load(path, map_location="cpu", weights_only=True)
                bad.update(k for k in keys if k not in sd)
            except Exception:  # noqa: BLE001
                bad.update(keys)
    return bad


# ---------------------------------------------------------------------------------------------
# What inspect says
# ---------------------------------------------------------------------------------------------

def inspect(cli: str, path: Path, *extra: str) -> tuple[int, dict | None, str]:
    p = subprocess.run([cli, "inspect", str(path), "--json", "--no-cache", *extra],
                       capture_output=True, text=True, timeout=300)
    try:
        return p.returncode, json.loads(p.stdout), p.stderr
    except ValueError:
        return p.returncode, None, p.stderr


def compare(tally: Tally, label: str, cli: str, path: Path, want: set[str], damaged: set[str],
            *extra: str, offsets: bool = True) -> None:
    """inspect's unreadable keys against `want`; each naming one of the `damaged` files (by
    name) and, with `offsets`, an offset."""
    rc, got, err = inspect(cli, path, *extra)
    if got is None:
        tally.unit(label, [f"exit {rc}, no JSON: {err.strip()[:300]}"])
        return
    problems = [p for p in got["problems"] if p["effect"] == "unreadable"]
    keys = {p["key"] for p in problems}
    out = []
    if keys != want:
        out.append(f"unreadable: {len(keys)} keys, torch {len(want)}; only inspect "
                   f"{sorted(keys - want)[:3]}, only torch {sorted(want - keys)[:3]}")
    for p in problems:
        if Path(str(p.get("file"))).name not in damaged or (offsets and p.get("offset") is None):
            out.append(f"problem does not name a damaged file and offset: {p}")
            break
    if rc != (1 if want or got["problems"] else 0):
        out.append(f"exit {rc} with {len(got['problems'])} problems")
    tally.unit(label, out)


def copy(src: Path, tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def replace_with_text(path: Path) -> None:
    path.unlink()
    path.write_bytes(TEXT)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def small_dcp(out: Path) -> Path:
    g = torch.Generator().manual_seed(37)
    sd = {"w": torch.randn(64, 8, generator=g), "ids": torch.arange(100, dtype=torch.int64),
          "half": torch.randn(7, 3, generator=g).to(torch.bfloat16),
          "nested": {"b": torch.randn(5, generator=g)}, "meta": {"step": 3, "name": "damage"},
          # an object whose data.pkl is more than the ends the check reads first
          "table": [list(range(i, i + 50)) for i in range(100)]}
    dcp.save(sd, storage_writer=FileSystemWriter(str(out), thread_count=1), no_dist=True)
    return out


def case_dcp_windows(a, tmp: Path, tally: Tally) -> None:
    src = small_dcp(tmp / "windows_src")
    work = tmp / "windows"
    for rel, off, length, key in dcp_items(src):
        spots = sorted(set(range(0, min(length, 1100), 8)) | set(range(max(0, length - 1100), length, 8)))
        for i, pos in enumerate(spots):
            fill = b"\0" if i % 2 == 0 else b"\xff"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(src, work)
            patch(work / rel, off + pos, fill * min(8, length - pos))
            compare(tally, f"dcp_windows: {key} +{pos} {fill.hex()}", a.cli, work,
                    torch_dcp_unreadable(work), {Path(rel).name})


def dcp_cases(a, src: Path, tmp: Path, tally: Tally, label: str, *extra: str,
              zero: bool = True) -> None:
    items = dcp_items(src)
    by_file: dict[str, list] = {}
    for it in items:
        by_file.setdefault(it[0], []).append(it)
    victim = max(by_file, key=lambda f: (src / f).stat().st_size)
    size = (src / victim).stat().st_size
    if zero:  # a range over a third of the file, its ends inside items
        d = copy(src, tmp, f"{label}_zeroed")
        lo, hi = size // 3 + 5, 2 * size // 3 - 7
        patch(d / victim, lo, bytes(hi - lo))
        compare(tally, f"{label}: a zeroed range", a.cli, d, torch_dcp_unreadable(d), {victim}, *extra)
    d = copy(src, tmp, f"{label}_overwritten")  # the middle item's first 64 bytes
    _, off, length, _ = by_file[victim][len(by_file[victim]) // 2]
    patch(d / victim, off, (b"overwritten!" * 6)[:min(64, length)])
    compare(tally, f"{label}: an item's start overwritten", a.cli, d, torch_dcp_unreadable(d),
            {victim}, *extra)
    d = copy(src, tmp, f"{label}_text")
    replace_with_text(d / victim)
    compare(tally, f"{label}: a data file replaced by text", a.cli, d, torch_dcp_unreadable(d),
            {victim}, *extra)


def case_dcp(a, tmp: Path, tally: Tally) -> None:
    dcp_cases(a, Path(a.fixtures) / "dcp_2ranks", tmp, tally, "dcp")


def case_dcp_zstd(a, tmp: Path, tally: Tally) -> None:
    src = Path(a.fixtures) / "dcp_zstd"
    dcp_cases(a, src, tmp, tally, "dcp_zstd", zero=False)
    # Inside a compressed item only undoing it tells: --hash reads, and checks, every item.
    dcp_cases(a, src, tmp, tally, "dcp_zstd --hash", "--hash")


def touched(items, rel: str, lo: int, hi: int) -> set[str]:
    """Keys with bytes in [lo, hi) of `rel`: the others read as before, byte for byte."""
    return {k for f, off, n, k in items if f == rel and off < hi and off + n > lo}


def case_dcp_sampled(a, tmp: Path, tally: Tally) -> None:
    # A big checkpoint's open checks a sample: the first item of 1 key in 100 here
    # (SHARDSCOPE_ITEM_SAMPLE=20: past 400 items, 20 spaced keys) and each file's first and last.
    os.environ["SHARDSCOPE_ITEM_SAMPLE"] = "20"
    src = tmp / "sampled_src"
    g = torch.Generator().manual_seed(2000)
    sd = {f"layer{i // 100}.p{i % 100}": torch.randn(4, generator=g) for i in range(2000)}
    dcp.save(sd, storage_writer=FileSystemWriter(str(src), thread_count=2), no_dist=True)
    items = dcp_items(src)
    rel = items[0][0]
    mine = [it for it in items if it[0] == rel]
    # 300 items in a row, of about 600 consecutive keys: some of them sampled.
    d = copy(src, tmp, "sampled_run")
    lo, hi = mine[len(mine) // 4][1] + 9, mine[len(mine) // 4 + 300][1] + 9
    patch(d / rel, lo, bytes(hi - lo))
    _, got, _ = inspect(a.cli, d)
    sampled = (got or {}).get("info", {}).get("item_check", "")
    tally.unit("dcp_sampled: the open samples, then checks the broken file whole",
               [] if " of " in sampled and "whole" in sampled else [f"item_check {sampled!r}"])
    compare(tally, "dcp_sampled: a zeroed run of items", a.cli, d,
            torch_dcp_unreadable(d, touched(items, rel, lo, hi)), {Path(rel).name})
    # One item's end zeroed, between samples: the open may miss it, inspect --hash (which
    # reads, and checks, every item) may not.
    d = copy(src, tmp, "sampled_one")
    _, off, length, key = mine[len(mine) // 2 + 7]
    patch(d / rel, off + length - 30, bytes(30))
    compare(tally, "dcp_sampled --hash: one damaged item", a.cli, d,
            torch_dcp_unreadable(d, touched(items, rel, off + length - 30, off + length)),
            {Path(rel).name}, "--hash")
    del os.environ["SHARDSCOPE_ITEM_SAMPLE"]


def set_cases(a, src: Path, index_name: str, tmp: Path, tally: Tally, label: str) -> None:
    shards = list(dict.fromkeys(json.loads((src / index_name).read_text())["weight_map"].values()))
    victim = shards[-1]
    size = (src / victim).stat().st_size
    damages = {
        "its first 4 KiB zeroed": lambda p: patch(p, 0, bytes(min(4096, size))),
        "its start overwritten": lambda p: patch(p, 0, b"overwritten!" * 4),
        "replaced by text": replace_with_text,
        "a range in its middle zeroed": lambda p: patch(p, size // 2, bytes(size // 8)),
        "its last 1 KiB zeroed": lambda p: patch(p, size - 1024, bytes(1024)),
    }
    for what, damage in damages.items():
        d = copy(src, tmp, f"{label}_{len(what)}")
        damage(d / victim)
        want = torch_set_unreadable(d / index_name)
        compare(tally, f"{label}: a shard with {what}", a.cli, d, want, {victim})


def case_safetensors(a, tmp: Path, tally: Tally) -> None:
    set_cases(a, Path(a.fixtures) / "safetensors_sharded", "model.safetensors.index.json", tmp,
              tally, "safetensors")


def case_bin(a, tmp: Path, tally: Tally) -> None:
    src = tmp / "bin_src"
    src.mkdir()
    g = torch.Generator().manual_seed(7)
    weight_map = {}
    for s in range(2):
        name = f"pytorch_model-0000{s + 1}-of-00002.bin"
        shard = {f"model.layers.{s}.{p}": torch.randn(16, 8, generator=g) for p in ("q", "k", "v")}
        torch.save(shard, src / name)
        weight_map.update({k: name for k in shard})
    (src / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    set_cases(a, src, "pytorch_model.bin.index.json", tmp, tally, "bin")


CASES = {"dcp_windows": case_dcp_windows, "dcp": case_dcp, "dcp_zstd": case_dcp_zstd,
         "dcp_sampled": case_dcp_sampled, "safetensors": case_safetensors, "bin": case_bin}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--fixtures", required=True, help="tools/make_fixtures.py's output")
    ap.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
    a = ap.parse_args()
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="ss-damage-") as tmp:
        for name in a.cases or CASES:
            CASES[name](a, Path(tmp), tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
