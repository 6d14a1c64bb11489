#!/usr/bin/env python3
"""Which torch reads a DCP checkpoint's metadata, as ShardScope says and as torch does.

    python tools/check_torch_compat.py --cli shardscope-cli --newest-python PY \
        [--python PY]... claims|fix|reports

Run with the project's (pinned) torch. --newest-python is a virtual environment with the newest
torch the package index serves (./dev makes .venv-newest); every --python is one more torch to
hold the claims to (e.g. a torch 2.4 venv, by hand: `pip install torch==2.4.1 "numpy<2"`).

claims:  checkpoints written by the pinned torch and by the newest (plain, strided, float8_e8m0fnu,
         zstd items); for each, `inspect --json`'s torch_readable, then every torch at hand loads
         it with a strict dcp.load: the claim "torch X reads it" must be what torch X does, and
         what it reads is bit for bit what the writing torch saved.
fix:     the newest torch's checkpoint, `fix --for-torch` the pinned torch's release: the pinned
         torch loads the output bit for bit as the newest torch loads the source; the data files
         are the source's (hard links), the source is untouched; a release the data needs newer
         than is refused, nothing written; an already readable checkpoint is left alone.
reports: diff (text, JSON, --against) and report (Markdown, HTML, JSON) say what inspect says.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def torch_line(v: str) -> tuple[int, int]:
    major, minor = v.split("+")[0].split(".")[:2]
    return int(major), int(minor)


# ---------------------------------------------------------------- run under any torch


def child_write(out: str, kind: str) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(7)
    sd = {"w": torch.randn(4, 3, generator=g),
          "b": torch.randn(5, generator=g).bfloat16(),
          # a transposed view: torch 2.15 records its strides
          "t": torch.randn(3, 6, generator=g).t()}
    if kind == "e8m0":
        sd["scale"] = torch.randint(100, 140, (4, 2), dtype=torch.uint8,
                                    generator=g).view(torch.float8_e8m0fnu)
    if kind == "zstd":
        from torch.distributed.checkpoint import FileSystemWriter
        from torch.distributed.checkpoint._extension import ZStandard
        dcp.save(sd, storage_writer=FileSystemWriter(out, _extensions=[ZStandard()]))
    else:
        dcp.save(sd, checkpoint_id=out)


def child_load(d: str) -> None:
    """Prints what this torch does with the checkpoint: its version, and the values or the
    error (its type and message, as a user would see them)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    out = {"torch": torch.__version__}
    try:
        md = dcp.FileSystemReader(d).read_metadata().state_dict_metadata
        sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
              for k, m in md.items() if hasattr(m, "size")}
        dcp.load(sd, checkpoint_id=d, planner=DefaultLoadPlanner(allow_partial_load=False))
        out["values"] = {k: [str(v.dtype), list(v.shape),
                             bytes(v.contiguous().reshape(-1).view(torch.uint8).tolist()).hex()]
                         for k, v in sorted(sd.items())}
    except BaseException as e:  # noqa: BLE001 - what the user sees (CheckpointException too)
        out["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    print(json.dumps(out))


# ---------------------------------------------------------------- the checks


class Ctx:
    def __init__(self, a: argparse.Namespace, tmp: Path):
        self.cli = a.cli
        self.tmp = tmp
        self.pythons = [sys.executable, a.newest_python] + (a.python or [])
        self.newest = a.newest_python
        self.failures: list[str] = []
        self._loads: dict[tuple[str, str], dict] = {}

    def check(self, ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            self.failures.append(what)

    def py(self, python: str, *args: str) -> str:
        r = subprocess.run([python, __file__, *args], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"{python} {' '.join(args)} failed:\n{r.stderr[-3000:]}")
        return r.stdout

    def write(self, python: str, name: str, kind: str) -> Path:
        out = self.tmp / name
        if not out.exists():
            self.py(python, "--child-write", str(out), kind)
        return out

    def load(self, python: str, d: Path) -> dict:
        key = (python, str(d))
        if key not in self._loads:
            self._loads[key] = json.loads(self.py(python, "--child-load", str(d)))
        return self._loads[key]

    def cli_run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=600)

    def readable(self, d: Path) -> dict:
        r = self.cli_run("inspect", str(d), "--json", "--no-cache")
        if r.returncode not in (0, 1):
            raise SystemExit(f"inspect {d}: {r.stderr}")
        return json.loads(r.stdout)["torch_readable"]


def versions(ctx: Ctx) -> dict[str, str]:
    return {p: ctx.load(p, ctx.write(sys.executable, "probe", "plain"))["torch"]
            for p in ctx.pythons}


def written_set(ctx: Ctx) -> list[tuple[str, Path]]:
    """(writer's version, checkpoint): plain and float8_e8m0fnu by each torch, zstd by the
    pinned one (the newest venv has no zstandard)."""
    out = []
    for python, tag in ((sys.executable, "pinned"), (ctx.newest, "newest")):
        out.append((python, ctx.write(python, f"{tag}-plain", "plain")))
        out.append((python, ctx.write(python, f"{tag}-e8m0", "e8m0")))
    out.append((sys.executable, ctx.write(sys.executable, "pinned-zstd", "zstd")))
    return out


def claims(ctx: Ctx) -> None:
    have = versions(ctx)
    for writer, d in written_set(ctx):
        claim = ctx.readable(d)
        saved = ctx.load(writer, d)
        ctx.check("values" in saved, f"{d.name}: the writing torch {saved['torch']} reads it back")
        for python, v in have.items():
            said = claim["from"] is not None and torch_line(v) >= torch_line(claim["from"])
            got = ctx.load(python, d)
            does = "values" in got
            ctx.check(said == does,
                      f"{d.name}: ShardScope says torch {v} {'reads' if said else 'cannot read'} it "
                      f"({claim['explained']}); torch {v} "
                      f"{'reads it' if does else 'raises ' + got.get('error', '')}")
            if does and "values" in saved:
                ctx.check(got["values"] == saved["values"],
                          f"{d.name}: torch {v} reads the values torch {saved['torch']} saved")
    # The issue's own case: what the newest torch writes, the pinned one cannot unpickle, and
    # ShardScope names why in the words torch raises.
    newest = ctx.write(ctx.newest, "newest-plain", "plain")
    claim = ctx.readable(newest)
    pinned = ctx.load(sys.executable, newest)
    if "error" in pinned:
        ctx.check(any(pinned["error"].split(": ", 1)[-1] in l["why"] for l in claim["limits"]),
                  f"newest-plain: the limit quotes torch {pinned['torch']}'s error "
                  f"({pinned['error']})")


def same_file(a: Path, b: Path) -> bool:
    sa, sb = a.stat(), b.stat()
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def fix(ctx: Ctx) -> None:
    pinned_v = ctx.load(sys.executable, ctx.write(sys.executable, "probe", "plain"))["torch"]
    target = ".".join(map(str, torch_line(pinned_v)))
    src = ctx.write(ctx.newest, "newest-plain", "plain")
    before = (src / ".metadata").read_bytes()
    out = ctx.tmp / "for-pinned"
    r = ctx.cli_run("fix", str(src), "--for-torch", target, "-o", str(out), "--json")
    res = json.loads(r.stdout) if r.stdout.startswith("{") else {}
    source_reads = ctx.readable(src)
    pinned_src = ctx.load(sys.executable, src)
    if "values" in pinned_src:  # nothing to rewrite for this pair of torches
        ctx.check(r.returncode == 0 and not out.exists(),
                  f"fix --for-torch {target}: torch {pinned_v} already reads the source, nothing "
                  f"written (exit {r.returncode})")
        return
    ctx.check(r.returncode == 0 and res.get("written"),
              f"fix --for-torch {target} of what torch {ctx.load(ctx.newest, src)['torch']} wrote: "
              f"exit {r.returncode}, written {res.get('written')} {r.stderr.strip()}")
    if not out.exists():
        return
    got = ctx.load(sys.executable, out)
    want = ctx.load(ctx.newest, src)
    ctx.check(got.get("values") == want["values"],
              f"torch {pinned_v} loads the output bit for bit as torch {want['torch']} loads the "
              f"source ({got.get('error', 'same values')})")
    ctx.check(ctx.load(ctx.newest, out).get("values") == want["values"],
              f"torch {want['torch']} still loads the output bit for bit")
    out_reads = ctx.readable(out)
    ctx.check(out_reads["from"] is not None and torch_line(out_reads["from"]) <= torch_line(target),
              f"inspect says the output is read by {out_reads['text']} (source: "
              f"{source_reads['text']})")
    data = sorted(p.name for p in src.iterdir() if p.suffix == ".distcp")
    ctx.check(bool(data) and all(same_file(src / n, out / n) for n in data),
              f"the output's data files are the source's, hard-linked ({len(data)})")
    ctx.check((src / ".metadata").read_bytes() == before, "the source's .metadata is untouched")
    manifest = json.loads((out / "shardscope-fix.json").read_text())
    ctx.check(manifest.get("for_torch") == target and manifest.get("repaired") is True,
              f"the manifest names torch {target} ({manifest.get('for_torch')}, repaired "
              f"{manifest.get('repaired')})")
    # Already readable: left alone.
    again = ctx.tmp / "again"
    r = ctx.cli_run("fix", str(out), "--for-torch", target, "-o", str(again))
    ctx.check(r.returncode == 0 and not again.exists() and "nothing written" in r.stdout,
              f"fix --for-torch {target} of a checkpoint torch {target} reads: nothing written "
              f"(exit {r.returncode}: {r.stdout.strip()})")
    # What the data needs cannot be rewritten: an older release than a dtype or a transform
    # needs is refused, nothing written, and the reason named.
    for name, kind in (("pinned-e8m0", "e8m0"), ("pinned-zstd", "zstd")):
        d = ctx.write(sys.executable, name, kind)
        need = ctx.readable(d)["from"]
        older = f"{torch_line(need)[0]}.{torch_line(need)[1] - 1}"
        blocked = ctx.tmp / f"{name}-old"
        r = ctx.cli_run("fix", str(d), "--for-torch", older, "-o", str(blocked))
        ctx.check(r.returncode == 1 and not blocked.exists() and "cannot read it" in r.stdout,
                  f"fix --for-torch {older} of {name} (needs {need}): refused, nothing written "
                  f"(exit {r.returncode})")
    r = ctx.cli_run("fix", str(src), "--for-torch", "1.13", "-o", str(ctx.tmp / "x"))
    ctx.check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1,
              f"--for-torch 1.13 (unchecked release): exit 2, one line ({r.stderr.strip()})")


LAYOUT = {"schema": "shardscope.layout/1", "family": "test", "source": "x",
          "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
          "transformer_engine": False, "params": []}


def reports(ctx: Ctx) -> None:
    pinned = ctx.write(sys.executable, "pinned-plain", "plain")
    newest = ctx.write(ctx.newest, "newest-plain", "plain")
    layout = dict(LAYOUT)
    saved = ctx.load(ctx.newest, newest)["values"]
    layout["params"] = [{"name": k, "shape": v[1], "dtype": v[0].removeprefix("torch."),
                         "tp_dim": -1} for k, v in saved.items()]
    lay = ctx.tmp / "layout.json"
    lay.write_text(json.dumps(layout))
    for d in (pinned, newest):
        want = ctx.readable(d)
        r = ctx.cli_run("diff", str(d), "--layout", str(lay), "--json")
        got = json.loads(r.stdout).get("torch_readable")
        ctx.check(got == want, f"diff --json of {d.name}: {got and got['text']}")
        r = ctx.cli_run("diff", str(d), "--layout", str(lay))
        ctx.check(f"read by:    {want['explained']}" in r.stdout,
                  f"diff's text of {d.name} says {want['text']}")
        r = ctx.cli_run("inspect", str(d), "--no-cache")
        ctx.check(f"read by: {want['explained']}" in r.stdout,
                  f"inspect's text of {d.name} says {want['text']}")
        for ext in ("md", "html", "json"):
            f = ctx.tmp / f"{d.name}.{ext}"
            r = ctx.cli_run("report", str(d), "--layout", str(lay), "-o", str(f))
            text = f.read_text() if f.exists() else ""
            if ext == "json":
                ok = json.loads(text)["summary"]["torch_readable"] == want if text else False
            else:
                ok = want["text"] in text and all(
                    l["why"].split(":")[0] in text for l in want["limits"])
            ctx.check(ok, f"report .{ext} of {d.name} says {want['text']}")
    r = ctx.cli_run("diff", str(pinned), "--against", str(newest), "--json")
    j = json.loads(r.stdout)
    ctx.check(j.get("first_torch_readable") == ctx.readable(pinned)
              and j.get("second_torch_readable") == ctx.readable(newest),
              "diff --against --json names which torch reads each")
    r = ctx.cli_run("diff", str(pinned), "--against", str(newest))
    ctx.check(ctx.readable(newest)["explained"] in r.stdout,
              "diff --against's text names which torch reads each")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child-write":
        child_write(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--child-load":
        child_load(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--newest-python", required=True)
    ap.add_argument("--python", action="append")
    ap.add_argument("case", choices=["claims", "fix", "reports"])
    a = ap.parse_args()
    if not os.access(a.newest_python, os.X_OK):
        print(f"no newest torch at {a.newest_python} (./dev makes .venv-newest): skipped")
        return 77
    with tempfile.TemporaryDirectory(prefix="ss-torch-compat-") as t:
        ctx = Ctx(a, Path(t))
        {"claims": claims, "fix": fix, "reports": reports}[a.case](ctx)
    print(f"{len(ctx.failures)} failed" if ctx.failures else "all passed")
    return 1 if ctx.failures else 0


if __name__ == "__main__":
    sys.exit(main())
