#!/usr/bin/env python3
"""No read blocks on a file that is not regular.

    python tools/check_special_files.py --cli shardscope-cli

Real torch (and the safetensors package) writes a DCP checkpoint, a torch.save file, a
safetensors file and a sharded safetensors set; the CLI writes a layout from a config. Then each
file a command reads is replaced in turn by a FIFO with no writer, a Unix socket, a symlink to
/dev/zero, /dev/urandom and /dev/null (character devices) and a symlink to a block device, and
the command must end within seconds (a FIFO's open() would block forever), by exit code 2 with
one stderr line naming the file (exit 1 with one folded `problem:` line where the file is a DCP
data file: the checkpoint's keys are still readable), and never by a signal.
Prints one line per failure and "N passed, M failed"; exits 0 only when all pass.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

TIMEOUT = 20  # seconds: a refusal is immediate; a blocked read never ends


def block_device() -> str | None:
    for name in sorted(os.listdir("/dev")):
        try:
            if stat.S_ISBLK(os.stat(f"/dev/{name}").st_mode):
                return f"/dev/{name}"
        except OSError:
            continue
    return None


def make_special(path: Path, kind: str) -> str | None:
    """Replaces `path` by a file of `kind`; the reason when it cannot be made."""
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.close()  # the socket file stays
    elif kind == "block":
        dev = block_device()
        if dev is None:
            return "no block device in /dev"
        path.symlink_to(dev)
    else:
        path.symlink_to(kind)
    return None


def release(path: Path) -> None:
    """A reader blocked on the FIFO gets its end of file (so a failing run ends)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def run(cli: str, args: list[str], fifo: Path) -> tuple[int | None, str]:
    p = subprocess.Popen([cli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        release(fifo)
        p.kill()
        _, err = p.communicate()
        return None, err.decode("utf-8", "replace")
    return p.returncode, err.decode("utf-8", "replace")


def write_checkpoints(root: Path, cli: str, demo_config: Path) -> dict[str, Path]:
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(25)
    sd = {"w": torch.randn(16, 8, generator=g), "b": torch.randn(16, generator=g)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(root / "dcp"))
        dcp.save(sd, checkpoint_id=str(root / "dcp2"))
    torch.save(sd, root / "model.pt")
    save_file(sd, str(root / "model.safetensors"))
    sharded = root / "sharded"
    sharded.mkdir()
    save_file({"w": sd["w"]}, str(sharded / "model-00001-of-00002.safetensors"))
    save_file({"b": sd["b"]}, str(sharded / "model-00002-of-00002.safetensors"))
    (sharded / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {}, "weight_map": {"w": "model-00001-of-00002.safetensors",
                                       "b": "model-00002-of-00002.safetensors"}}))
    shutil.copy(demo_config, root / "config.json")
    layout = root / "layout.json"
    subprocess.run([cli, "layout", "--from-config", str(root / "config.json"), "-o", str(layout)],
                   check=True, capture_output=True, timeout=120)
    tracker = root / "megatron"
    (tracker / "iter_0000001").mkdir(parents=True)
    for f in (root / "dcp").iterdir():
        shutil.copy(f, tracker / "iter_0000001" / f.name)
    (tracker / "latest_checkpointed_iteration.txt").write_text("1")
    return {"root": root, "layout": layout}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--demo-config", required=True, help="the bundled demo's config.json")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ss-special-"))
    tally = Tally()
    try:
        write_checkpoints(root, a.cli, Path(a.demo_config))
        data = next(p.name for p in (root / "dcp").iterdir() if p.suffix == ".distcp")
        data2 = next(p.name for p in (root / "dcp2").iterdir() if p.suffix == ".distcp")
        r = str(root)
        keys = ["b", "w"]  # what write_checkpoints saved
        # (file replaced, command, expected exit): every reader's way in.
        cases = [
            (".metadata file", root / "dcp/.metadata", ["inspect", f"{r}/dcp"], 2),
            (".metadata named", root / "dcp/.metadata", ["inspect", f"{r}/dcp/.metadata"], 2),
            ("DCP data file", root / "dcp" / data, ["inspect", f"{r}/dcp", "--hash", "--stats"], 1),
            ("DCP data file, JSON", root / "dcp" / data, ["inspect", f"{r}/dcp", "--json", "--hash"], 1),
            ("DCP data file, values", root / "dcp2" / data2,
             ["diff", f"{r}/dcp", "--against", f"{r}/dcp2", "--values"], 2),
            ("Megatron tracker", root / "megatron/latest_checkpointed_iteration.txt",
             ["inspect", f"{r}/megatron"], 2),
            ("torch.save file", root / "model.pt", ["inspect", f"{r}/model.pt"], 2),
            ("safetensors file", root / "model.safetensors", ["inspect", f"{r}/model.safetensors"], 2),
            ("safetensors index", root / "sharded/model.safetensors.index.json",
             ["inspect", f"{r}/sharded/model.safetensors.index.json"], 2),
            # A shard breaks only the keys the index puts in it, as a DCP data file does.
            ("safetensors shard", root / "sharded/model-00001-of-00002.safetensors",
             ["inspect", f"{r}/sharded/model.safetensors.index.json", "--hash"], 1, ["w"]),
            ("layout", root / "layout.json", ["diff", f"{r}/dcp", "--layout", f"{r}/layout.json"], 2),
            ("layout, report", root / "layout.json",
             ["report", f"{r}/dcp", "--layout", f"{r}/layout.json", "-o", f"{r}/out.json"], 2),
            ("config", root / "config.json", ["layout", "--from-config", f"{r}/config.json"], 2),
        ]
        kinds = ["fifo", "socket", "/dev/zero", "/dev/urandom", "/dev/null", "block"]
        for what, path, args, want, *broken in cases:
            broken_keys = broken[0] if broken else keys
            keep = path.with_name(path.name + ".orig")
            shutil.move(path, keep)
            for kind in kinds:
                name = f"{what} as {kind}"
                why = make_special(path, kind)
                if why and kind == "block":  # a container without block devices: nothing to link
                    print(f"SKIP {name}: {why}")
                    continue
                if why:
                    tally.unit(name, [f"cannot make it: {why}"])
                    continue
                rc, err = run(a.cli, args, path)
                lines = err.strip().splitlines()
                problems = []
                if rc is None:
                    problems.append(f"still running after {TIMEOUT} s: the read blocked")
                elif rc < 0:
                    problems.append(f"ended by signal {-rc}: {err[-300:]!r}")
                elif rc != want:
                    problems.append(f"exit {rc}, want {want}: {err[-300:]!r}")
                # An error is one line; a data file's keys are each one problem line (folded
                # into one when many), never a second one from a read that was tried anyway.
                count = len(broken_keys) if want == 1 else 1
                if rc is not None and (len(lines) != count or any(
                        path.name not in x or "not a regular file" not in x for x in lines)):
                    problems.append(f"want {count} line(s) naming {path.name} as not regular: "
                                    f"{lines!r}")
                if want == 1 and not all(x.startswith("problem: ") for x in lines):
                    problems.append(f"not problem lines: {lines!r}")
                if want == 1 and sorted(x.split("key '")[1].split("'")[0] for x in lines
                                        if "key '" in x) != sorted(broken_keys):
                    problems.append(f"want one problem per key {sorted(broken_keys)}: {lines!r}")
                tally.unit(name, problems)
            path.unlink()
            shutil.move(keep, path)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
