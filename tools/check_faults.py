#!/usr/bin/env python3
"""Read faults are survived: one line per broken key, and the rest of the work goes on.

    python tools/check_faults.py --cli shardscope-cli --shim libreadfault.so --fixtures DIR

A DCP checkpoint that real torch wrote over two ranks (FIXTURES/dcp_2ranks) is read with
`inspect --hash --stats` while tests/faults/readfault.cpp, preloaded into the unmodified CLI,
makes every read of one data file fail with EIO, or come back short and then end early. Then a
copy of it is cut short after its metadata was read (the shrink a rewrite does between the
metadata and the data read, emulated by a file the metadata still describes whole) and its data
file deleted. Each time:
- the process ends normally (exit 1: problems), never by a signal or a hang;
- every key with a chunk in the broken file has a one-line problem naming the file, the key
  and the offset, and no key of the other file does;
- every key stored wholly in the other file is read and hashed, equal to torch's own bytes.
Prints one line per failure and "N passed, M failed".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle  # noqa: E402
from tally import Tally  # noqa: E402

BROKEN = "__0_0.distcp"


def chunk_files(md) -> dict[str, list[tuple[str, int, int]]]:
    """Where each key's items live (file, offset, length), from torch's own metadata."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for index, info in md.storage_data.items():
        out.setdefault(index.fqn, []).append((info.relative_path, info.offset, info.length))
    return out


def check(cli: str, ckpt: Path, env: dict, want: dict, files: dict,
          kept: int = 0) -> list[str]:
    """`kept`: the broken file's first bytes that are still there (a file cut short)."""
    r = subprocess.run([cli, "inspect", str(ckpt), "--json", "--hash", "--stats"],
                       capture_output=True, timeout=300, env={**os.environ, **env})
    problems = []
    if r.returncode not in (1, 2):
        problems.append(f"exit {r.returncode} (a signal is negative); stderr {r.stderr[-400:]!r}")
        return problems
    try:
        report = json.loads(r.stdout)
    except ValueError as e:
        return [f"no JSON ({e}); stderr {r.stderr[-400:]!r}"]
    broken_keys = {k for k, items in files.items()
                   if any(f == BROKEN and off + n > kept for f, off, n in items)}
    named = {}
    for p in report.get("problems") or []:
        named.setdefault(p.get("key"), []).append(p)
    for key in sorted(broken_keys & set(want["tensors"])):
        ps = named.get(key)
        if not ps:
            problems.append(f"{key}: no problem reported for its broken chunk")
            continue
        p = ps[0]
        if not str(p.get("file", "")).endswith(BROKEN) or (p.get("offset") is None
                                                           and "missing" not in p.get("message", "")):
            problems.append(f"{key}: the problem does not name the file and offset: {p}")
    for key in sorted(set(named) - broken_keys - {None, ""}):
        problems.append(f"{key}: a problem for a key of the healthy file: {named[key]}")
    got = {t["key"]: t for t in report.get("tensors") or []}
    healthy = [k for k in want["tensors"] if k not in broken_keys]
    if not healthy:
        problems.append("the fixture has no key outside the broken file")
    for key in healthy:
        if got.get(key, {}).get("sha256") != want["tensors"][key]["sha256"]:
            problems.append(f"{key}: not read after the fault: {got.get(key, {}).get('sha256')!r}")
    for line in r.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("problem:") and BROKEN not in line:
            problems.append(f"a problem line without the file: {line!r}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--shim", required=True, help="the LD_PRELOAD read fault injector")
    ap.add_argument("--fixtures", type=Path, required=True)
    a = ap.parse_args()
    src = a.fixtures / "dcp_2ranks"
    md = oracle.dcp_metadata(src)
    files = chunk_files(md)
    want = oracle.expected(src)
    t = Tally()

    # The shim's own proof: without a fault it changes nothing.
    asan = os.environ.get("ASAN_OPTIONS", "")
    # A sanitized build's runtime must come first; the shim only wraps pread().
    preload = {"LD_PRELOAD": a.shim,
               "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}
    r = subprocess.run([a.cli, "inspect", str(src), "--json", "--hash"], capture_output=True,
                       timeout=300, env={**os.environ, **preload})
    t.unit("no fault", [] if r.returncode == 0 else [f"exit {r.returncode}"])
    for mode in ("eio", "short"):
        env = {**preload, "SHARDSCOPE_FAULT": mode, "SHARDSCOPE_FAULT_FILE": BROKEN}
        t.unit(mode, check(a.cli, src, env, want, files))

    with tempfile.TemporaryDirectory() as tmp:
        # Cut short: the metadata still says the whole file is there.
        cut = Path(tmp) / "cut"
        shutil.copytree(src, cut)
        size = (cut / BROKEN).stat().st_size
        os.truncate(cut / BROKEN, size // 3)
        t.unit("shrunk", check(a.cli, cut, {}, want, files, kept=size // 3))
        gone = Path(tmp) / "gone"
        shutil.copytree(src, gone)
        (gone / BROKEN).unlink()
        t.unit("deleted", check(a.cli, gone, {}, want, files))

    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
