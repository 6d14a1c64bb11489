#!/usr/bin/env python3
"""Lies in a checkpoint's metadata cannot make ShardScope take unbounded memory.

    python tools/check_limits.py --cli shardscope-cli --peakrss peakrss [--chunks N]

Writes checkpoints whose metadata lies, with torch's own classes and pickle (and a torch.save
archive edited after writing), then runs `inspect` (and `inspect --stats --hash`, which reads
data) on each and reads the process's peak RSS (wait4). Each must end within two minutes
(exit 0, 1 or 2, one line per error, no signal) under its bound (SECURITY.md states them):
- a tensor claiming a petabyte (2**48 float32 elements) in one chunk of a 4 KiB file:
  BASE;
- a tensor of N one-element chunks (default a million; 120 MB of metadata):
  BASE + 3 x the metadata file;
- planner_data nested 50,000 and 100,000 tuples deep: BASE;
- a torch.save archive whose zip records claim 2**62-byte sizes and offsets: BASE;
- a legacy (pre-1.6) torch.save stream whose storage claims 2**60 elements: BASE;
- a zstd DCP item (torch's ZStandard extension) that inflates to 512 MiB behind a chunk of
  four floats: BASE.
BASE is the process at rest with libtorch loaded (`inspect --stats --hash` of a four-float
checkpoint torch wrote; libtorch is loaded on demand, so `rules` alone would not count it)
plus 128 MiB.
Prints each measurement, "N passed, M failed".
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                    TensorProperties, TensorStorageMetadata)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

MIB = 1 << 20


PEAKRSS = ""


def peak_rss(cmd: list[str]) -> tuple[int, int, bytes]:
    """(exit status, peak RSS in bytes, stderr) of one process, through tests/faults/peakrss."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rss"
        try:  # a lie must not cost time without bound either (a million chunks: < 2 s)
            p = subprocess.run([PEAKRSS, *cmd], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env={**os.environ, "PEAKRSS_OUT": str(out)},
                               timeout=120)
        except subprocess.TimeoutExpired:
            return -1, 0, b"no end within 120 s"
        kib, code = (int(x) for x in out.read_text().split())
        return code, kib * 1024, p.stderr


def dcp(dir_: Path, sd: dict, storage: dict, planner=None) -> Path:
    dir_.mkdir(parents=True)
    md = Metadata(state_dict_metadata=sd, planner_data=planner, storage_data=storage)
    with open(dir_ / ".metadata", "wb") as f:
        pickle.dump(md, f)
    (dir_ / "__0_0.distcp").write_bytes(b"\0" * 4096)
    return dir_


def petabyte(root: Path) -> Path:
    n = 1 << 48
    sd = {"w": TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size([n]),
                                     [ChunkStorageMetadata(torch.Size([0]), torch.Size([n]))])}
    st = {MetadataIndex("w", torch.Size([0])): _StorageInfo("__0_0.distcp", 0, 4 * n)}
    return dcp(root / "petabyte", sd, st)


def tiny_chunks(root: Path, n: int) -> Path:
    chunks = [ChunkStorageMetadata(torch.Size([i]), torch.Size([1])) for i in range(n)]
    sd = {"w": TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size([n]),
                                     chunks)}
    st = {MetadataIndex("w", torch.Size([i])): _StorageInfo("__0_0.distcp", 4 * (i % 1024), 4)
          for i in range(n)}
    return dcp(root / "chunks", sd, st)


def deep_planner(root: Path, depth: int) -> Path:
    sd = {"w": TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size([4]),
                                     [ChunkStorageMetadata(torch.Size([0]), torch.Size([4]))])}
    st = {MetadataIndex("w", torch.Size([0])): _StorageInfo("__0_0.distcp", 0, 16)}
    d = dcp(root / f"deep{depth}", sd, st, planner={"w": "@@DEEP@@"})
    # Python's pickler recurses in C and cannot write 100,000 levels: the nesting is spliced in
    # as the opcodes it would write (MARK ... TUPLE), in the place of a placeholder string.
    data = (d / ".metadata").read_bytes()
    placeholder = b"\x8c\x08@@DEEP@@"
    assert data.count(placeholder) == 1
    deep = b"(" * depth + b"\x8c\x01w" + b"t" * depth
    (d / ".metadata").write_bytes(data.replace(placeholder, deep))
    return d


def huge_zip(root: Path) -> Path:
    buf = io.BytesIO()
    torch.save({"w": torch.ones(4)}, buf)
    data = bytearray(buf.getvalue())
    # Every central directory record claims 2**62 bytes at offset 2**62 (its ZIP64 extra field,
    # where torch writes them, or the 32-bit fields).
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        infos = z.infolist()
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        struct.pack_into("<II", data, at + 20, 0xFFFFFFFF, 0xFFFFFFFF)
        struct.pack_into("<I", data, at + 42, 0xFFFFFFFF)
        extra = at + 46 + name_len
        end = extra + extra_len
        while extra + 4 <= end:
            tag, size = struct.unpack_from("<HH", data, extra)
            if tag == 1:
                for k in range(size // 8):
                    struct.pack_into("<Q", data, extra + 4 + 8 * k, 1 << 62)
            extra += 4 + size
        at = data.find(b"PK\x01\x02", at + 4)
    p = root / "huge.pt"
    p.write_bytes(bytes(data))
    assert infos
    return p


def huge_legacy(root: Path) -> Path:
    """torch's legacy stream whose storage claims 2**60 float32 elements, in the object pickle
    (numel) and in its record's count alike, over a record of four floats."""
    import pickletools
    buf = io.BytesIO()
    torch.save({"w": torch.ones(4)}, buf, _use_new_zipfile_serialization=False)
    data = bytearray(buf.getvalue())
    f = io.BytesIO(bytes(data))
    ends = []
    for _ in range(5):  # magic, version, sys info, objects, storage keys
        for _op in pickletools.genops(f):
            pass
        ends.append(f.tell())
    # The object pickle's numel is BININT1 4 just before NONE (view_metadata) and TUPLE.
    objects = data[ends[2]:ends[3]]
    at = objects.rfind(b"K\x04Nt")
    assert at >= 0
    huge = b"\x8a\x08" + struct.pack("<q", 1 << 60)  # LONG1, 8 bytes
    data[ends[2]:ends[3]] = objects[:at] + huge + objects[at + 2:]
    shift = len(huge) - 2
    struct.pack_into("<q", data, ends[4] + shift, 1 << 60)
    p = root / "huge-legacy.pt"
    p.write_bytes(bytes(data))
    return p


def small(root: Path) -> Path:
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint import state_dict_saver as saver
    d = root / "small"
    saver.save({"w": torch.ones(4)}, storage_writer=FileSystemWriter(str(d)), no_dist=True)
    return d


def zstd_bomb(root: Path) -> Path:
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint import state_dict_saver as saver
    from torch.distributed.checkpoint._extension import ZStandard
    d = root / "zstd"
    # Zeros compress to almost nothing: 512 MiB of them are a few KiB on disk.
    saver.save({"w": torch.ones(4), "big": torch.zeros(128 * MIB)},
               storage_writer=FileSystemWriter(str(d), _extensions=[ZStandard()]),
               no_dist=True)
    with open(d / ".metadata", "rb") as f:
        md = pickle.load(f)
    # "w" now names the item that holds "big", and "big" is gone: only the lie is left to read.
    w, big = MetadataIndex("w", torch.Size([0])), MetadataIndex("big", torch.Size([0]))
    md.storage_data[w] = md.storage_data.pop(big)
    del md.state_dict_metadata["big"]
    with open(d / ".metadata", "wb") as f:
        pickle.dump(md, f)
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--peakrss", required=True, help="tests/faults/peakrss, built")
    ap.add_argument("--chunks", type=int, default=1_000_000)
    a = ap.parse_args()
    global PEAKRSS
    PEAKRSS = a.peakrss
    t = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code, rest, err = peak_rss([a.cli, "inspect", str(small(root)), "--stats", "--hash"])
        if code != 0:
            print(f"the four-float checkpoint: exit {code}: {err.decode()[-300:]}")
            return 1
        base = rest + 128 * MIB
        print(f"process at rest, libtorch loaded: {rest / MIB:.0f} MiB; BASE {base / MIB:.0f} MiB")
        cases = [("petabyte tensor", petabyte(root), lambda p: base),
                 (f"{a.chunks:,} one-element chunks", tiny_chunks(root, a.chunks),
                  lambda p: base + 3 * (p / ".metadata").stat().st_size),
                 ("planner_data 50,000 deep", deep_planner(root, 50_000), lambda p: base),
                 ("planner_data 100,000 deep", deep_planner(root, 100_000), lambda p: base),
                 ("zip claiming 2**62-byte records", huge_zip(root), lambda p: base),
                 ("legacy storage claiming 2**60 elements", huge_legacy(root), lambda p: base),
                 ("zstd item inflating to 512 MiB", zstd_bomb(root), lambda p: base)]
        for name, path, bound in cases:
            for extra in ([], ["--stats", "--hash"]):
                code, rss, err = peak_rss([a.cli, "inspect", str(path), *extra])
                limit = bound(path)
                text = err.decode("utf-8", "replace")
                problems = []
                if code not in (0, 1, 2):  # 128 + N: killed by signal N; -1: timed out
                    problems.append(f"exit {code}: {text[-300:]!r}")
                # A sanitizer's shadow memory and quarantine are not ShardScope's: under one,
                # only the ending is checked.
                sanitized = "ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ
                if rss > limit and not sanitized:
                    problems.append(f"peak RSS {rss / MIB:.0f} MiB over {limit / MIB:.0f} MiB")
                if any(len(l) > 2000 for l in text.splitlines()):
                    problems.append("an error line of over 2,000 characters")
                label = f"{name}{' ' + ' '.join(extra) if extra else ''}"
                first = next((l for l in text.splitlines() if l), "")
                print(f"{label}: exit {code}, peak RSS {rss / MIB:.0f} MiB "
                      f"(bound {limit / MIB:.0f}); {first[:160]}")
                t.unit(label, problems)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
