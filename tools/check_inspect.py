#!/usr/bin/env python3
"""Compare `shardscope-cli inspect` with what torch reads (tools/oracle.py).

    python tools/check_inspect.py --cli shardscope-cli CHECKPOINT [--box-samples N]
    python tools/check_inspect.py --cli shardscope-cli --bad FIXTURES/bad

Checkpoint mode runs `shardscope-cli inspect CHECKPOINT --json --hash --stats` and checks that
tensor and object keys match the oracle exactly, and per tensor: dtype, shape, DCP chunks (plus
each chunk's file/offset/length against the DCP storage_data), sha256 and stats (counts exact;
min/max/mean/std to a relative 1e-9). With --box-samples N it also compares N random sub-box
hashes, using the command template --box-cmd.

Bad mode runs `shardscope-cli inspect PATH` for every case of MANIFEST.json and checks the exit
code, that stderr contains every expected substring, that errors are one line each and that
the process did not die from a signal or hang.

Prints one line per mismatch and a final "N passed, M failed"; exits 0 only when all pass.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tally import Tally  # noqa: E402

REL_TOL = 1e-9
SCHEMA = "shardscope.inspect/1"
DEFAULT_BOX_CMD = "{cli} box {path} {key} {offsets} {sizes}"
CRASH_MARKERS = ("terminate called", "Segmentation fault", "AddressSanitizer", "core dumped",
                 "Traceback (most recent call last)", "Assertion `")


def run(cmd: list[str], timeout: float) -> tuple[int | None, str, str]:
    """(returncode or None on timeout, stdout, stderr)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return None, text(e.stdout), text(e.stderr)


def describe_rc(rc: int | None) -> str:
    if rc is None:
        return "timed out"
    if rc < 0:
        return f"killed by signal {-rc}"
    return f"exit {rc}"


def close(a: float, b: float, scale: float) -> bool:
    # Relative tolerance, with an absolute floor tied to the tensor's magnitude so that a mean
    # or std that is ~0 after cancellation is not judged relative to itself.
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=REL_TOL * scale)


# ---------------------------------------------------------------------------------------------
# Checkpoint mode
# ---------------------------------------------------------------------------------------------

def compare_stats(want: dict, got, problems: list[str]) -> None:
    if not isinstance(got, dict):
        problems.append("stats missing")
        return
    for k in ("count", "nan", "posinf", "neginf"):
        if got.get(k) != want[k]:
            problems.append(f"stats.{k}: cli {got.get(k)!r}, torch {want[k]!r}")
    if "finite" in got:
        finite = want["count"] - want["nan"] - want["posinf"] - want["neginf"]
        if got["finite"] != finite:
            problems.append(f"stats.finite: cli {got['finite']!r}, torch {finite}")
    # Our health kernels (kernels/healthcore.h): exact counts, histogram and fingerprint.
    for k in ("denormal", "histogram", "fingerprint"):
        if k in want and got.get(k) != want[k]:
            problems.append(f"stats.{k}: cli {got.get(k)!r}, torch {want[k]!r}")
    scale = max(abs(want["min"]), abs(want["max"])) if want["min"] is not None else 0.0
    if "l2" in got and not close(float(got["l2"]), want["l2"], max(want["l2"], 1e-300)):
        problems.append(f"stats.l2: cli {got['l2']!r}, torch {want['l2']!r}")
    for k in ("min", "max", "mean", "std"):
        w, g = want[k], got.get(k)
        if w is None:
            if g is not None:
                problems.append(f"stats.{k}: cli {g!r}, torch null (no finite values)")
        elif not isinstance(g, (int, float)) or isinstance(g, bool) or not close(float(g), w, scale):
            problems.append(f"stats.{k}: cli {g!r}, torch {w!r}")


def dcp_storage(path: Path) -> dict | None:
    """{(key, offsets): (file name, offset, length)} from the DCP metadata, or None if not DCP."""
    import oracle
    kind, real = oracle.resolve(path)
    if kind != "dcp":
        return None
    md = oracle.dcp_metadata(real)
    return {(idx.fqn, tuple(idx.offset)): (Path(info.relative_path).name, info.offset, info.length)
            for idx, info in md.storage_data.items() if idx.offset is not None}


def compare_tensor(key: str, want: dict, got: dict, storage: dict | None) -> list[str]:
    problems = []
    if got.get("dtype") != want["dtype"]:
        problems.append(f"dtype: cli {got.get('dtype')!r}, torch {want['dtype']!r}")
    if got.get("shape") != want["shape"]:
        problems.append(f"shape: cli {got.get('shape')!r}, torch {want['shape']!r}")
    if "chunks" in want:
        cli_chunks = got.get("chunks") or []
        boxes = [{"offsets": c.get("offsets"), "sizes": c.get("sizes")} for c in cli_chunks]
        if boxes != want["chunks"]:
            problems.append(f"chunks: cli {boxes}, torch {want['chunks']}")
        elif storage is not None:
            for c in cli_chunks:
                where = storage.get((key, tuple(c["offsets"])))
                got_loc = (Path(str(c.get("file", ""))).name, c.get("offset"), c.get("length"))
                if got_loc != where:
                    problems.append(f"chunk {c['offsets']} location: cli {got_loc}, torch {where}")
    if got.get("sha256") != want["sha256"]:
        problems.append(f"sha256: cli {got.get('sha256')!r}, torch {want['sha256']!r}")
    compare_stats(want["stats"], got.get("stats"), problems)
    return problems


def reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def check_box_samples(args, ckpt: Path, want: dict, tally: Tally) -> None:
    import oracle
    rng = random.Random(0)
    candidates = sorted(k for k, v in want["tensors"].items() if v["shape"] and 0 not in v["shape"])
    if not candidates:
        return
    picks = [rng.choice(candidates) for _ in range(args.box_samples)]
    tensors = oracle.load_tensors(ckpt, sorted(set(picks)))
    for i, key in enumerate(picks):
        shape = want["tensors"][key]["shape"]
        offsets = [rng.randrange(n) for n in shape]
        sizes = [rng.randint(1, n - o) for n, o in zip(shape, offsets)]
        expect = oracle.sha256(oracle.narrow_box(tensors[key], offsets, sizes))
        fields = {"cli": args.cli, "path": str(ckpt), "key": key,
                  "offsets": ",".join(map(str, offsets)), "sizes": ",".join(map(str, sizes))}
        cmd = [part.format(**fields) for part in shlex.split(args.box_cmd)]
        rc, out, err = run(cmd, args.timeout)
        problems = []
        if rc != 0:
            problems.append(f"{describe_rc(rc)}: {err.strip()[:300]}")
        else:
            try:
                got = json.loads(out).get("sha256")
            except (ValueError, AttributeError):
                got = None
                problems.append(f"unparsable output {out.strip()[:200]!r}")
            if got is not None and got != expect:
                problems.append(f"sha256: cli {got!r}, torch {expect!r}")
        tally.unit(f"box[{i}] {key} offsets={offsets} sizes={sizes}", problems)


def check_checkpoint(args) -> int:
    import oracle
    tally = Tally()
    ckpt = Path(args.checkpoint)
    cmd = [args.cli, "inspect", str(ckpt), "--json", "--hash", "--stats"]
    rc, out, err = run(cmd, args.timeout)
    tally.unit("exit code", [] if rc == 0 else [f"{describe_rc(rc)}; stderr: {err.strip()[:500]}"])
    try:
        report = json.loads(out, parse_constant=reject_constant)
    except ValueError as e:
        tally.unit("json", [f"cannot parse CLI output: {e}; first bytes {out[:200]!r}"])
        return tally.finish()

    tally.unit("schema", [] if report.get("schema") == SCHEMA else [f"schema {report.get('schema')!r}"])
    health = []
    if report.get("healthy") is not True:
        health.append(f"healthy is {report.get('healthy')!r}")
    for p in report.get("problems") or []:
        health.append(f"problem reported: {p}")
    tally.unit("healthy", health)

    want = oracle.expected(ckpt)
    storage = dcp_storage(ckpt)
    got_tensors: dict[str, dict] = {}
    for t in report.get("tensors") or []:
        if t.get("key") in got_tensors:
            tally.unit(f"tensor {t.get('key')}", ["listed twice by the CLI"])
        got_tensors[t.get("key")] = t
    for key, w in want["tensors"].items():
        if key not in got_tensors:
            tally.unit(f"tensor {key}", ["missing from CLI output"])
        else:
            tally.unit(f"tensor {key}", compare_tensor(key, w, got_tensors[key], storage))
    for key in got_tensors.keys() - want["tensors"].keys():
        tally.unit(f"tensor {key}", ["reported by CLI but not a tensor torch reads"])

    # Object order in DCP metadata depends on plan merging, so compare as sets.
    got_objects = [o.get("key") for o in report.get("objects") or []]
    for key in sorted(set(got_objects)):
        if got_objects.count(key) > 1:
            tally.unit(f"object {key}", ["listed twice by the CLI"])
    for key in want["objects"]:
        tally.unit(f"object {key}", [] if key in got_objects else ["missing from CLI output"])
    for key in sorted(set(got_objects) - set(want["objects"])):
        tally.unit(f"object {key}", ["reported by CLI but not an object torch reads"])

    # Nesting: "path" is given when it is not the key split at every dot.
    entries = list(got_tensors.values()) + list(report.get("objects") or [])
    for e in entries:
        key = e.get("key")
        if key in want.get("paths", {}):
            got = e.get("path") or key.split(".")
            w = want["paths"][key]
            tally.unit(f"path {key}", [] if got == w else [f"path {got} != planner_data {w}"])

    if args.box_samples:
        check_box_samples(args, ckpt, want, tally)
    return tally.finish()


# ---------------------------------------------------------------------------------------------
# Bad-input mode
# ---------------------------------------------------------------------------------------------

def check_bad(args) -> int:
    tally = Tally()
    bad_dir = Path(args.bad)
    manifest = json.loads((bad_dir / "MANIFEST.json").read_text())
    for name, case in manifest.items():
        rc, _, err = run([args.cli, "inspect", str(bad_dir / case["path"])], args.timeout)
        problems = []
        if rc is None or rc < 0:
            problems.append(describe_rc(rc))
        elif rc != case["expect_exit"]:
            problems.append(f"exit {rc}, expected {case['expect_exit']}")
        lines = [l for l in err.splitlines() if l.strip()]
        if not lines:
            problems.append("nothing on stderr")
        elif case["expect_exit"] == 2 and len(lines) != 1:
            problems.append(f"fatal error should be one line, got {len(lines)}: {lines[:3]}")
        for marker in CRASH_MARKERS:
            if marker in err:
                problems.append(f"stderr looks like a crash ({marker!r})")
        for needle in case["expect_in_error"]:
            if needle not in err:
                problems.append(f"stderr lacks {needle!r}: {err.strip()[:300]!r}")
        if "expect_unreadable" in case:  # data a load cannot read: torch's storage_data says which
            rc, out, _ = run([args.cli, "inspect", "--json", str(bad_dir / case["path"])],
                             args.timeout)
            got = {p["key"] for p in json.loads(out)["problems"] if p["effect"] == "unreadable"}
            want = set(case["expect_unreadable"])
            if got != want:
                problems.append(f"unreadable keys: {sorted(got ^ want)[:4]} differ from torch's")
        tally.unit(f"bad/{name}", problems)
    return tally.finish()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True, help="path to shardscope-cli")
    ap.add_argument("checkpoint", nargs="?", help="checkpoint path (checkpoint mode)")
    ap.add_argument("--bad", metavar="MANIFEST_DIR", help="check the hostile inputs of MANIFEST_DIR instead")
    ap.add_argument("--box-samples", type=int, default=0, metavar="N", help="random sub-box reads to compare")
    ap.add_argument("--box-cmd", default=DEFAULT_BOX_CMD,
                    help="command for one sub-box hash, printing JSON {\"sha256\": ...}; fields "
                         "{cli} {path} {key} {offsets} {sizes} (comma-separated ints); default: %(default)s")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per CLI run")
    args = ap.parse_args(argv)
    if (args.bad is None) == (args.checkpoint is None):
        ap.error("give either a CHECKPOINT or --bad MANIFEST_DIR")
    if shutil.which(args.cli) is None:
        ap.error(f"--cli {args.cli}: not an executable")
    return check_bad(args) if args.bad else check_checkpoint(args)


if __name__ == "__main__":
    sys.exit(main())
