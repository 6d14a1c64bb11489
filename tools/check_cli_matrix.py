#!/usr/bin/env python3
"""Every CLI subcommand with every output flag ends by an exit code, in time.

    python tools/check_cli_matrix.py --cli shardscope-cli --demo DEMO --changed CHANGED

Runs each subcommand (inspect, layout, diff, report, fix, verify, rules, devices) with each of its
output flags and option families on the bundled demo, on a copy of it with one data file cut
short (written here), against itself and against CHANGED (the demo with one tensor changed by
real torch, tools/make_changed_copy.py), each under a timeout. A run fails when it ends by a
signal, runs past its timeout, exits other than 0, 1 or 2, exits 2 with anything but one
stderr line, or claims success without its output: every report file must exist and parse (JSON)
or name its checkpoint (Markdown, HTML), and every --json stdout must parse.

The structure-only report (`report A --against B`, which once aborted) is also checked against
`diff A --against B --json`: the report's changes are the diff's.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

TIMEOUT = 240


def run(cli: str, args: list[str]) -> tuple[int | None, str, str]:
    try:
        p = subprocess.run([cli, *args], capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def cut_copy(demo: Path, out: Path) -> Path:
    """The demo with its second data file 3000 bytes short (as the README's screenshot)."""
    shutil.copytree(demo, out)
    data = sorted(out.glob("iter_*/*.distcp"))[-1]
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size - 3000)
    return out


def commands(ckpt: str, other: str, layout: str, key: str, out: str, tag: str,
             pair_only: bool) -> list[tuple[list[str], str | None]]:
    """(arguments, the file the command must write or None); `pair_only`: only the commands
    that read the second checkpoint."""
    o = lambda name: f"{out}/{tag}-{name}"  # noqa: E731
    c: list[tuple[list[str], str | None]] = []
    single = not pair_only
    for flags in ([], ["--json"], ["--hash"], ["--stats"], ["--objects"], ["--no-collapse"],
                  ["--all-problems"], ["--filter", "*mlp*"], ["--stats", "--init-std", "0"],
                  ["--tensor", key, "--stats", "--hash"], ["--tensor", key, "--json"],
                  ["--json", "--hash", "--stats", "--objects", "--all-problems"]):
        if single:
            c.append((["inspect", ckpt, *flags], None))
    for flags in ([], ["--json"], ["--strictness", "log_all", "--no-strict"],
                  ["--strictness", "ignore_all", "--no-strict", "--disable-rule", "mla_down_proj"],
                  ["--no-optimizer", "--json"], ["--measure-casts", "--fail-on-cast"],
                  ["--check-init", "--init-std", "0.02", "--json"], ["--all"],
                  ["--all", "--disable-rule", "mla_down_proj", "--no-strict", "--strictness",
                   "ignore_all"]):
        if single:
            c.append((["diff", ckpt, "--layout", layout, *flags], None))
    for flags in ([], ["--json"], ["--disable-rule", "mla_down_proj"], ["--values"],
                  ["--values", "--json"], ["--values", "--layout", layout, "--json"],
                  ["--values", "--disable-rule", "mla_down_proj", "--allow-not-compared"],
                  ["--values", "--atol", "1e-3", "--rtol", "1e-3", "--threads", "1",
                   "--max-memory", "100000", "--no-gpu"]):
        c.append((["diff", ckpt, "--against", other, *flags], None))
    for ext in ("md", "html", "json"):
        if single:
            c.append((["report", ckpt, "--layout", layout, "-o", o(f"layout.{ext}")],
                      o(f"layout.{ext}")))
            c.append((["report", ckpt, "--layout", layout, "--disable-rule", "mla_down_proj",
                       "--no-strict", "--strictness", "log_all", "-o", o(f"rules.{ext}")],
                      o(f"rules.{ext}")))
        c.append((["report", ckpt, "--against", other, "-o", o(f"against.{ext}")],
                  o(f"against.{ext}")))
        c.append((["report", ckpt, "--against", other, "--disable-rule", "swiglu", "-o",
                   o(f"against-rules.{ext}")], o(f"against-rules.{ext}")))
        c.append((["report", ckpt, "--against", other, "--values", "-o", o(f"values.{ext}")],
                  o(f"values.{ext}")))
        c.append((["report", ckpt, "--against", other, "--values", "--layout", layout, "-o",
                   o(f"values-layout.{ext}")], o(f"values-layout.{ext}")))
    for i, flags in enumerate(([], ["--json"], ["--partial", "--json"], ["--copy"],
                               ["--no-strict", "--strictness", "ignore_all", "--no-optimizer"])):
        if single:
            c.append((["fix", ckpt, "--layout", layout, "--disable-rule", "mla_down_proj", "-o",
                       o(f"fixed-{i}"), *flags], None))
    for flags in (["--quiet"], ["--json"], ["--json", "--hash", "--quiet"],
                  ["--dp", "2", "--quiet"], ["--dp", "2", "--max-memory", "60000", "--threads",
                                             "1", "--json"],
                  ["--disable-rule", "mla_down_proj", "--quiet"]):
        if single:
            c.append((["verify", ckpt, "--layout", layout, *flags], None))
    return c


def check_one(cli: str, args: list[str], output: str | None) -> list[str]:
    if output and os.path.exists(output):
        os.unlink(output)
    rc, out, err = run(cli, args)
    lines = err.strip().splitlines()
    if rc is None:
        return [f"still running after {TIMEOUT} s"]
    if rc < 0:
        return [f"ended by signal {-rc}: {err[-400:]!r}"]
    if rc not in (0, 1, 2):
        return [f"exit {rc}: {err[-400:]!r}"]
    if rc == 2:
        if len(lines) != 1 or not lines[0].startswith("shardscope-cli: "):
            return [f"exit 2 wants one error line, got {lines!r}"]
        return []
    problems = []
    if "--json" in args:
        try:
            json.loads(out)
        except ValueError as e:
            problems.append(f"stdout is not JSON: {e}")
    if output:
        if not os.path.exists(output) or os.path.getsize(output) == 0:
            problems.append(f"exit {rc} but no {os.path.basename(output)}")
        elif output.endswith(".json"):
            try:
                json.loads(Path(output).read_text())
            except ValueError as e:
                problems.append(f"{os.path.basename(output)} is not JSON: {e}")
        elif os.path.basename(args[1]) not in Path(output).read_text():
            problems.append(f"{os.path.basename(output)} does not name {args[1]}")
    return problems


def check_structure_report(cli: str, a: str, b: str, out: Path) -> list[str]:
    """The structure-only report holds exactly the diff's changes."""
    rc, text, err = run(cli, ["diff", a, "--against", b, "--json"])
    if rc not in (0, 1):
        return [f"diff --against: exit {rc} {err!r}"]
    want = json.loads(text)
    path = out / "structure.json"
    rc2, _, err = run(cli, ["report", a, "--against", b, "-o", str(path)])
    if rc2 != rc:
        return [f"report exit {rc2}, diff exit {rc}: {err!r}"]
    got = json.loads(path.read_text())

    def changes(d) -> list:
        return sorted(json.dumps(c, sort_keys=True) for c in d["changes"])

    body = got.get("checkpoint_diff", got.get("diff", got))
    if changes(body) != changes(want):
        return [f"report changes differ from diff --against: {changes(body)[:2]} vs {changes(want)[:2]}"]
    for ext in ("md", "html"):
        p = out / f"structure.{ext}"
        rc3, _, err = run(cli, ["report", a, "--against", b, "-o", str(p)])
        text = p.read_text() if p.exists() else ""
        missing = [c["key"] for c in want["changes"] if c["key"] not in text]
        if rc3 != rc or missing:
            return [f"{ext}: exit {rc3}, changed keys not named: {missing[:3]} {err!r}"]
    return []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--changed", required=True, help="make_changed_copy.py's copy of the demo")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ss-matrix-"))
    tally = Tally()
    try:
        demo = Path(a.demo)
        broken = cut_copy(demo, tmp / "cut")
        layout = tmp / "layout.json"
        rc, _, err = run(a.cli, ["layout", "--from-config", str(demo / "config.json"), "-o",
                                 str(layout)])
        if rc != 0:
            tally.unit("layout", [f"exit {rc}: {err!r}"])
            return tally.finish()
        rc, text, _ = run(a.cli, ["inspect", str(demo), "--json"])
        key = next(t["key"] for t in json.loads(text)["tensors"] if "linear_fc1" in t["key"])
        jobs: list[tuple[str, list[str], str | None]] = []
        config = str(demo / "config.json")
        for lflags in ([], ["--tp", "2", "--ep", "2"], ["--sequential-experts"],
                       ["--no-mla-down-proj-fusion", "--dtype", "bfloat16"], ["--pp", "2"]):
            jobs.append(("layout", ["layout", "--from-config", config, *lflags], None))
        jobs.append(("layout", ["layout", "--from-config", config, "-o", str(tmp / "l.json")],
                     str(tmp / "l.json")))
        for args in (["rules"], ["devices"], ["--version"], ["--help"], ["inspect", "--help"],
                     ["report", "--help"], ["verify", "--help"]):
            jobs.append((args[0], args, None))
        pairs = (("demo", str(demo), str(demo), False), ("cut", str(broken), str(demo), False),
                 ("demo-changed", str(demo), a.changed, True),
                 ("changed-cut", a.changed, str(broken), True))
        for tag, ckpt, other, pair_only in pairs:
            for args, output in commands(ckpt, other, str(layout), key, str(tmp), tag,
                                         pair_only):
                jobs.append((tag, args, output))
        with ThreadPoolExecutor(a.jobs) as pool:
            results = pool.map(lambda j: check_one(a.cli, j[1], j[2]), jobs)
            for (tag, args, _), problems in zip(jobs, results):
                tally.unit(f"{tag}: {' '.join(args[:1] + args[2:])}", problems)
        for tag, first, second in (("self", str(demo), str(demo)),
                                   ("changed", str(demo), a.changed),
                                   ("cut", str(broken), str(demo))):
            tally.unit(f"structure report {tag}", check_structure_report(a.cli, first, second,
                                                                         tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
