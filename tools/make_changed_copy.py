#!/usr/bin/env python3
"""A copy of a DCP checkpoint (Megatron's fsdp_dtensor or torch_dist, or plain DCP) in which
real torch changed one tensor: the workbench's compare test and screenshots.

    make_changed_copy.py SRC OUT [--key KEY] [--json] [--record FILE]

SRC is a checkpoint directory (a Megatron run folder with latest_checkpointed_iteration.txt, or
the iteration folder itself). The copy keeps the run folder's layout (tracker file, config.json)
and rewrites the iteration with torch.distributed.checkpoint: every entry as torch reads it,
with KEY (default: the first floating tensor whose name contains "linear_fc1") changed by
adding 0.5 to its first element. With --json it prints {"key": KEY, "numel": N} so that a test
compares with what torch changed, not with a name typed in.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def iteration_dir(src: Path) -> tuple[Path, str | None]:
    tracker = src / "latest_checkpointed_iteration.txt"
    if tracker.exists():
        it = tracker.read_text().strip()
        return src / f"iter_{int(it):07d}", f"iter_{int(it):07d}"
    return src, None


def walk(sd, prefix=""):
    for k, v in sd.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from walk(v, name + ".")
        else:
            yield name, sd, k, v


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--key")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--record", type=Path, help="also write the --json line to this file")
    args = ap.parse_args()

    it_dir, it_name = iteration_dir(args.src)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = Path(tmp) / "whole.pt"
        dcp_to_torch_save(str(it_dir), str(whole))
        state = torch.load(whole, weights_only=False)

    changed = None
    for name, parent, k, v in walk(state):
        if not isinstance(v, torch.Tensor) or not v.is_floating_point() or v.numel() == 0:
            continue
        if (args.key and name == args.key) or (not args.key and "linear_fc1" in name):
            v = v.clone()
            v.view(-1)[0] += 0.5
            parent[k] = v
            changed = (name, v.numel())
            break
    if changed is None:
        raise SystemExit(f"make_changed_copy: {args.src}: no tensor {args.key or '*linear_fc1*'}")

    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    target = args.out
    if it_name:
        for extra in args.src.iterdir():
            if extra.is_file():
                shutil.copy(extra, args.out / extra.name)
        target = args.out / it_name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(target))
    record = json.dumps({"key": changed[0], "numel": changed[1]})
    if args.record:
        args.record.write_text(record + "\n")
    if args.json:
        print(record)
    else:
        print(f"wrote {args.out}: {changed[0]} changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
