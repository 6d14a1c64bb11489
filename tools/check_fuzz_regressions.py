#!/usr/bin/env python3
"""Every input a fuzz harness once failed on, through the product's own front door.

    python tools/check_fuzz_regressions.py --cli shardscope-cli --demo DIR [REGRESSIONS]

fuzz/regressions/HARNESS/ keeps the inputs that made a harness (fuzz/*_fuzzer.cpp) crash, hang,
leak or overflow, after the fix. Each is laid out on disk the way its harness lays it out and
opened with shardscope-cli (inspect, layout --from-config, diff --layout). The CLI must end with
0, 1 or 2 (never a signal or an abort), print errors one line each, and end within a minute.
`./dev fuzz` replays the same inputs under ASan and UBSan in the harnesses themselves.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from tally import Tally  # noqa: E402

CONFIG_NAMES = ["config.json", "args.json", "args.txt", "train.sh"]  # config_fuzzer.cpp


def lay_out(harness: str, data: bytes, tmp: Path, demo: Path) -> list[list[str]] | None:
    """The CLI commands that read `data` as `harness` reads it (after the `shardscope-cli`)."""
    if harness in ("pickle", "dcp"):
        (tmp / "ckpt").mkdir()
        (tmp / "ckpt" / ".metadata").write_bytes(data)
        return [["inspect", str(tmp / "ckpt"), "--objects"]]
    if harness in ("zip", "torchsave"):
        (tmp / "model.pt").write_bytes(data)
        return [["inspect", str(tmp / "model.pt"), "--objects", "--stats"]]
    if harness == "safetensors":
        (tmp / "model.safetensors").write_bytes(data)
        return [["inspect", str(tmp / "model.safetensors"), "--stats"]]
    if harness == "safetensors_index":
        (tmp / "model.safetensors.index.json").write_bytes(data)
        return [["inspect", str(tmp / "model.safetensors.index.json")]]
    if harness == "megatron":
        parts = (data.split(b"@@@@", 3) + [b""] * 4)[:4]
        root = tmp / "root"
        (root / "iter_0000001").mkdir(parents=True)
        (root / "latest_checkpointed_iteration.txt").write_bytes(parts[0])
        for name, part in zip(("metadata.json", "common.pt", ".metadata"), parts[1:]):
            (root / "iter_0000001" / name).write_bytes(part)
        return [["inspect", str(root), "--objects"]]
    if harness == "layout":
        (tmp / "layout.json").write_bytes(data)
        return [["diff", str(demo), "--layout", str(tmp / "layout.json")]]
    if harness == "config":
        if not data:
            return []
        path = tmp / CONFIG_NAMES[data[0] % 4]
        path.write_bytes(data[1:])
        return [["layout", "--from-config", str(path), "-o", str(tmp / "out.json")]]
    # report: renderers only; indexcache: an entry is only read for the metadata it was made
    # from, which a laid-out input cannot be. Both are replayed by their harnesses.
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--demo", type=Path, required=True)
    ap.add_argument("regressions", type=Path, nargs="?", default=ROOT / "fuzz/regressions")
    a = ap.parse_args()
    t = Tally()
    inputs = sorted(p for p in a.regressions.glob("*/*") if p.is_file())
    if not inputs:
        print("no regression inputs")
        return 1
    for p in inputs:
        harness = p.parent.name
        with tempfile.TemporaryDirectory() as tmp:
            commands = lay_out(harness, p.read_bytes(), Path(tmp), a.demo)
            if commands is None:
                continue
            for cmd in commands:
                problems = []
                try:
                    r = subprocess.run([a.cli, *cmd], capture_output=True, timeout=60)
                    err = r.stderr.decode("utf-8", "replace")
                    if r.returncode not in (0, 1, 2):
                        problems.append(f"exit {r.returncode}: {err[-400:]!r}")
                    for marker in ("terminate called", "Aborted", "Sanitizer", "runtime error"):
                        if marker in err:
                            problems.append(f"{marker!r} in stderr")
                except subprocess.TimeoutExpired:
                    problems.append("no end within 60 s")
                name = f"{harness}/{p.name}: {cmd[0]}"
                t.unit(name, problems)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
